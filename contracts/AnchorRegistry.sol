// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title AnchorRegistry
/// @notice Public, append-only record of Merkle log checkpoints (RFC 9162 tree heads).
/// @dev One operator (the deployer) anchors `(size, root)` pairs per log. For each log the
///      anchored sizes strictly grow, so an anchor can never be replaced or rolled back: an
///      auditor who reads `rootAt(logId, size)` gets the one root the operator committed to.
///      `logId` is `keccak256(bytes(logIdString))` of the UTF-8 log id.
contract AnchorRegistry {
    /// @notice The only account allowed to anchor; fixed at deployment.
    address public immutable operator;

    /// @notice The largest size anchored so far for each log (0 = never anchored).
    mapping(bytes32 logId => uint64 size) public latestSize;

    /// @notice The root anchored for a log at a size (zero when that size was never anchored).
    mapping(bytes32 logId => mapping(uint64 size => bytes32 root)) public rootAt;

    /// @notice A checkpoint of log `logId` with `size` entries and Merkle root `root`.
    event Anchored(bytes32 indexed logId, uint64 size, bytes32 root);

    /// @notice The caller is not the operator.
    error NotOperator();

    /// @notice `proposed` does not exceed the `latest` size already anchored for the log.
    error SizeNotGrowing(uint64 latest, uint64 proposed);

    constructor() {
        operator = msg.sender;
    }

    /// @notice Record that log `logId` had Merkle root `root` at `size` entries.
    /// @dev Reverts with `NotOperator()` for any other caller and with
    ///      `SizeNotGrowing(latest, proposed)` unless `size > latestSize[logId]`
    ///      (hence size 0 can never be anchored).
    /// @param logId keccak256 of the UTF-8 log id.
    /// @param size Number of entries in the log at this checkpoint.
    /// @param root RFC 9162 Merkle tree head of the first `size` entries.
    function anchor(bytes32 logId, uint64 size, bytes32 root) external {
        if (msg.sender != operator) revert NotOperator();
        uint64 latest = latestSize[logId];
        if (size <= latest) revert SizeNotGrowing(latest, size);
        latestSize[logId] = size;
        rootAt[logId][size] = root;
        emit Anchored(logId, size, root);
    }
}
