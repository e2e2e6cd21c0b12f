// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title TaskEscrow
/// @notice Holds each task's budget between posting and settlement, with pull payments.
/// @dev A requester `open`s a task with its deposit and a deadline. Before it is refunded, the
///      operator (the deployer) may `settle` it once, crediting payees with amounts summing to at
///      most the deposit and the requester with the rest. If the task is never settled, its
///      requester may `refund` it once the deadline has passed. Money only leaves the contract
///      through `withdraw`, which pays the caller's accumulated credit. A settlement that cannot
///      pay someone yet (it has bound no payout account) names this contract itself as that
///      payee: the amount is held under the task (`held`), not credited to anyone, until the
///      operator `release`s it to the account its owner binds. While a task is open its
///      requester may `bond` more wei from its own account for the disputes its rejections open
///      (`bonded`): a settlement may pay out the deposit and the bond together, and a refund
///      returns both. Anyone else (the task's team) may `answer` a dispute with a bond of its
///      own (`answered`, by account): a settlement pays the deposit, the requester's bonds and
///      the answers together but must name payees for at least the answers (the requester's
///      remainder never exceeds its deposit and bonds), and after a refund each answering
///      account `reclaim`s its own answer. Every state change
///      happens before the one external call (checks-effects-interactions), so the contract's
///      balance always equals the open deposits, bonds and answers, plus the answers of
///      refunded tasks not yet reclaimed, plus the amounts held, plus the credits not yet
///      withdrawn.
///      `taskId` is `keccak256(bytes(taskIdString))` of the UTF-8 task id.
contract TaskEscrow {
    /// @notice Lifecycle of one task's escrow.
    enum State {
        None,
        Open,
        Settled,
        Refunded
    }

    struct Escrow {
        address requester;
        uint64 deadline;
        State state;
        uint256 deposit;
    }

    /// @notice The only account allowed to settle; fixed at deployment.
    address public immutable operator;

    /// @notice Wei each account may withdraw.
    mapping(address account => uint256 amount) public credit;

    mapping(bytes32 taskId => Escrow) private _escrows;

    /// @notice Wei a settled task holds for payees that could not be paid yet.
    mapping(bytes32 taskId => uint256 amount) public held;

    /// @notice Wei the requester of an open task bonded for its disputes, beyond the deposit.
    mapping(bytes32 taskId => uint256 amount) public bonded;

    /// @notice Wei `account` answered for `taskId`'s disputes (a team's bond); reclaimable by
    ///         it once the task is refunded, paid out by the settlement otherwise.
    mapping(bytes32 taskId => mapping(address account => uint256 amount)) public answered;

    /// @notice Wei every account answered for open `taskId`, in all (0 once settled).
    mapping(bytes32 taskId => uint256 amount) public answers;

    /// @notice `requester` deposited `deposit` wei for `taskId`, refundable after `deadline`.
    event Opened(bytes32 indexed taskId, address indexed requester, uint256 deposit, uint64 deadline);

    /// @notice `requester` bonded `amount` wei more for `taskId`'s disputes, `total` in all.
    event Bonded(bytes32 indexed taskId, address indexed requester, uint256 amount, uint256 total);

    /// @notice `account` answered `taskId`'s disputes with `amount` wei more, `total` in all.
    event Answered(bytes32 indexed taskId, address indexed account, uint256 amount, uint256 total);

    /// @notice `account` reclaimed its answer of `amount` wei to refunded `taskId`.
    event Reclaimed(bytes32 indexed taskId, address indexed account, uint256 amount);

    /// @notice `taskId` was settled: `amounts[i]` credited to `payees[i]`, `remainder` to its
    ///         requester.
    event Settled(bytes32 indexed taskId, address[] payees, uint256[] amounts, uint256 remainder);

    /// @notice `amount` wei `taskId` held was credited to `payee`.
    event Released(bytes32 indexed taskId, address indexed payee, uint256 amount);

    /// @notice The deposit of `taskId` (`amount` wei) was credited back to `requester`.
    event Refunded(bytes32 indexed taskId, address indexed requester, uint256 amount);

    /// @notice `account` withdrew its credit of `amount` wei.
    event Withdrawn(address indexed account, uint256 amount);

    /// @notice The caller is not the operator.
    error NotOperator();

    /// @notice The caller is not the task's requester.
    error NotRequester();

    /// @notice The task id was opened before (whatever its state now).
    error AlreadyOpened(bytes32 taskId);

    /// @notice `open` was called without a deposit.
    error ZeroDeposit();

    /// @notice The deadline is not after the current block's timestamp.
    error DeadlineNotInFuture(uint64 deadline, uint256 timestamp);

    /// @notice The task is not open (`state`: 0 none, 2 settled, 3 refunded).
    error NotOpen(bytes32 taskId, uint8 state);

    /// @notice `payees` and `amounts` have different lengths.
    error LengthMismatch(uint256 payees, uint256 amounts);

    /// @notice A payee is the zero address (its credit could never be withdrawn).
    error ZeroPayee();

    /// @notice The amounts sum to `total`, more than the task's `deposit`.
    error OverDeposit(uint256 total, uint256 deposit);

    /// @notice A refund before the task's deadline.
    error DeadlineNotReached(uint64 deadline, uint256 timestamp);

    /// @notice A bond that would not bring the task's bonds to the `total` it names (`actual`).
    error BondMismatch(uint256 total, uint256 actual);

    /// @notice The requester answered its own task's dispute (it bonds with `bond`).
    error RequesterAnswer();

    /// @notice A settlement paying `total` to payees, less than the task's `answers`: the
    ///         requester's remainder would take an answer.
    error AnswersUnpaid(uint256 total, uint256 answers);

    /// @notice The task is not refunded (`state`), or the caller answered nothing to it.
    error NothingToReclaim(bytes32 taskId, uint8 state);

    /// @notice A release of `amount` wei from a task holding only `held`.
    error OverHeld(uint256 amount, uint256 held);

    /// @notice The caller has no credit to withdraw.
    error NothingToWithdraw();

    /// @notice Sending `amount` wei to `account` failed (its credit is restored by the revert).
    error TransferFailed(address account, uint256 amount);

    constructor() {
        operator = msg.sender;
    }

    /// @notice Open the escrow of `taskId` with `msg.value` as its deposit.
    /// @dev Reverts with `AlreadyOpened`, `ZeroDeposit` or `DeadlineNotInFuture`.
    /// @param taskId keccak256 of the UTF-8 task id.
    /// @param deadline Unix time after which an unsettled task may be refunded.
    function open(bytes32 taskId, uint64 deadline) external payable {
        if (_escrows[taskId].state != State.None) revert AlreadyOpened(taskId);
        if (msg.value == 0) revert ZeroDeposit();
        if (deadline <= block.timestamp) revert DeadlineNotInFuture(deadline, block.timestamp);
        _escrows[taskId] =
            Escrow({requester: msg.sender, deadline: deadline, state: State.Open, deposit: msg.value});
        emit Opened(taskId, msg.sender, msg.value, deadline);
    }

    /// @notice Add `msg.value` to the dispute bond of open `taskId`, bringing it to `total`.
    /// @dev Requester only. `total` makes the call idempotent: a bond sent twice (a transaction
    ///      signed again) reverts instead of bonding twice. Reverts with `NotOpen`,
    ///      `NotRequester`, `ZeroDeposit` or `BondMismatch`.
    function bond(bytes32 taskId, uint256 total) external payable {
        Escrow storage escrow = _escrows[taskId];
        if (escrow.state != State.Open) revert NotOpen(taskId, uint8(escrow.state));
        if (msg.sender != escrow.requester) revert NotRequester();
        if (msg.value == 0) revert ZeroDeposit();
        uint256 after_ = bonded[taskId] + msg.value;
        if (after_ != total) revert BondMismatch(total, after_);
        bonded[taskId] = after_;
        emit Bonded(taskId, msg.sender, msg.value, after_);
    }

    /// @notice Answer the disputes of open `taskId` with `msg.value` more from the caller's own
    ///         account (a team's bond), its answers then `total`.
    /// @dev Anyone but the requester. `total` makes the call idempotent, as `bond`'s. Reverts
    ///      with `NotOpen`, `RequesterAnswer`, `ZeroDeposit` or `BondMismatch`.
    function answer(bytes32 taskId, uint256 total) external payable {
        Escrow storage escrow = _escrows[taskId];
        if (escrow.state != State.Open) revert NotOpen(taskId, uint8(escrow.state));
        if (msg.sender == escrow.requester) revert RequesterAnswer();
        if (msg.value == 0) revert ZeroDeposit();
        uint256 after_ = answered[taskId][msg.sender] + msg.value;
        if (after_ != total) revert BondMismatch(total, after_);
        answered[taskId][msg.sender] = after_;
        answers[taskId] += msg.value;
        emit Answered(taskId, msg.sender, msg.value, after_);
    }

    /// @notice Credit the caller its answer to refunded `taskId`.
    /// @dev Reverts with `NothingToReclaim`.
    function reclaim(bytes32 taskId) external {
        Escrow storage escrow = _escrows[taskId];
        uint256 amount = answered[taskId][msg.sender];
        if (escrow.state != State.Refunded || amount == 0) {
            revert NothingToReclaim(taskId, uint8(escrow.state));
        }
        answered[taskId][msg.sender] = 0;
        credit[msg.sender] += amount;
        emit Reclaimed(taskId, msg.sender, amount);
    }

    /// @notice Settle `taskId` once: credit `amounts[i]` to `payees[i]`, the rest to the requester.
    ///         An amount whose payee is this contract is held under the task (`release`).
    ///         The deposit, the requester's bond and the answers are paid out together; the
    ///         payees take at least the answers.
    /// @dev Operator only. Reverts with `NotOperator`, `NotOpen`, `LengthMismatch`, `ZeroPayee`,
    ///      `OverDeposit` (over the deposit plus the bond plus the answers) or `AnswersUnpaid`.
    ///      No transfer happens here (pull payments).
    function settle(bytes32 taskId, address[] calldata payees, uint256[] calldata amounts)
        external
    {
        if (msg.sender != operator) revert NotOperator();
        Escrow storage escrow = _escrows[taskId];
        if (escrow.state != State.Open) revert NotOpen(taskId, uint8(escrow.state));
        if (payees.length != amounts.length) revert LengthMismatch(payees.length, amounts.length);
        uint256 answering = answers[taskId];
        uint256 deposit = escrow.deposit + bonded[taskId] + answering;
        uint256 total = 0;
        for (uint256 i = 0; i < payees.length; ++i) {
            if (payees[i] == address(0)) revert ZeroPayee();
            total += amounts[i];
        }
        if (total > deposit) revert OverDeposit(total, deposit);
        if (total < answering) revert AnswersUnpaid(total, answering);
        escrow.state = State.Settled;
        bonded[taskId] = 0;
        answers[taskId] = 0;
        for (uint256 i = 0; i < payees.length; ++i) {
            if (payees[i] == address(this)) {
                held[taskId] += amounts[i];
            } else {
                credit[payees[i]] += amounts[i];
            }
        }
        uint256 remainder = deposit - total;
        if (remainder > 0) credit[escrow.requester] += remainder;
        emit Settled(taskId, payees, amounts, remainder);
    }

    /// @notice Credit `amount` wei that settled `taskId` holds to `payee`.
    /// @dev Operator only. Reverts with `NotOperator`, `ZeroPayee` or `OverHeld`.
    function release(bytes32 taskId, address payee, uint256 amount) external {
        if (msg.sender != operator) revert NotOperator();
        if (payee == address(0) || payee == address(this)) revert ZeroPayee();
        uint256 holding = held[taskId];
        if (amount > holding) revert OverHeld(amount, holding);
        held[taskId] = holding - amount;
        credit[payee] += amount;
        emit Released(taskId, payee, amount);
    }

    /// @notice Credit the whole deposit (and bond) of an unsettled `taskId` back to its requester.
    ///         Each answer stays its account's, to `reclaim`.
    /// @dev Requester only, after the deadline. Reverts with `NotOpen`, `NotRequester` or
    ///      `DeadlineNotReached`.
    function refund(bytes32 taskId) external {
        Escrow storage escrow = _escrows[taskId];
        if (escrow.state != State.Open) revert NotOpen(taskId, uint8(escrow.state));
        if (msg.sender != escrow.requester) revert NotRequester();
        if (block.timestamp <= escrow.deadline) {
            revert DeadlineNotReached(escrow.deadline, block.timestamp);
        }
        escrow.state = State.Refunded;
        uint256 amount = escrow.deposit + bonded[taskId];
        bonded[taskId] = 0;
        answers[taskId] = 0;
        credit[msg.sender] += amount;
        emit Refunded(taskId, msg.sender, amount);
    }

    /// @notice Pay the caller its whole credit.
    /// @dev The credit is zeroed before the transfer; reverts with `NothingToWithdraw` or
    ///      `TransferFailed`.
    function withdraw() external {
        uint256 amount = credit[msg.sender];
        if (amount == 0) revert NothingToWithdraw();
        credit[msg.sender] = 0;
        emit Withdrawn(msg.sender, amount);
        (bool ok,) = msg.sender.call{value: amount}("");
        if (!ok) revert TransferFailed(msg.sender, amount);
    }

    /// @notice The escrow of `taskId`: its requester, deposit, deadline and state
    ///         (0 none, 1 open, 2 settled, 3 refunded).
    function escrows(bytes32 taskId)
        external
        view
        returns (address requester, uint256 deposit, uint64 deadline, uint8 state)
    {
        Escrow storage escrow = _escrows[taskId];
        return (escrow.requester, escrow.deposit, escrow.deadline, uint8(escrow.state));
    }
}
