"""py_ecc's BLS12-381 code, loaded when first used instead of in every process that signs.

eth_account imports eth_keyfile (and so web3 does, and so every accord process that touches the
chain), and `eth_keyfile.keyfile` imports `py_ecc.bls` and `py_ecc.bls12_381` for its BLS
keystores. Importing those computes pairing constants: 0.6 to 0.75 s of CPU in each such
process, a quarter of an `accord` command's start, for code accord never runs. accord signs
Ethereum transactions with secp256k1 (eth_keys) and its own events with Ed25519.

`defer_bls_keystores()` puts a finder first on `sys.meta_path` that changes one import:
while `eth_keyfile.keyfile` executes, `py_ecc.bls` and `py_ecc.bls12_381` are two small
placeholders. The first gives the module a `G2ProofOfPossession` that imports the real
`py_ecc.bls` on its first attribute read (a BLS keystore's public key); the second gives it
`curve_order`, BLS12-381's group order, which it needs at once (for its largest v4 key). Both are
taken out of `sys.modules` as soon as the module has run, so every other importer of py_ecc,
before or after, gets the real modules. When they were imported already, nothing changes.
Should the module fail to run with the placeholders (an eth_keyfile that reads more of py_ecc
than the two names above), it runs again as a plain import: slower, never broken. The versions
of eth-keyfile and py-ecc it was written against are pinned in pyproject.toml.

Installed by the `accord` command and the service only (`accord._process`), never by
`import accord`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

KEYFILE_MODULE = "eth_keyfile.keyfile"

BLS12_381_GROUP_ORDER = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001
"""r, the order of BLS12-381's groups (py_ecc.bls12_381's `curve_order`)."""


class DeferredProofOfPossession:
    """Stands for `py_ecc.bls.G2ProofOfPossession` inside eth_keyfile: reading an attribute
    (`SkToPk`, say) imports py_ecc.bls and reads it from the real class. Raises what that
    import or attribute read raises."""

    def __getattr__(self, name: str) -> Any:
        return getattr(import_module("py_ecc.bls").G2ProofOfPossession, name)


def _placeholders() -> dict[str, ModuleType]:
    bls = ModuleType("py_ecc.bls", "placeholder while eth_keyfile.keyfile imports (accord._bls)")
    bls.G2ProofOfPossession = DeferredProofOfPossession()  # type: ignore[attr-defined]
    curve = ModuleType("py_ecc.bls12_381", "placeholder as above: curve_order only")
    curve.curve_order = BLS12_381_GROUP_ORDER  # type: ignore[attr-defined]
    return {"py_ecc.bls": bls, "py_ecc.bls12_381": curve}


class _KeyfileLoader(Loader):
    """eth_keyfile.keyfile's own loader, run with the placeholders in `sys.modules`."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Run the module with the placeholders; should it fail with them (a newer eth_keyfile
        reading another name of py_ecc's), run it again as a plain import, with the real
        modules: slower to start, never broken. Raises what the plain import raises."""
        placeholders = {n: m for n, m in _placeholders().items() if n not in sys.modules}
        sys.modules.update(placeholders)
        try:
            self.loader.exec_module(module)
        except Exception:
            _remove(placeholders)
            self.loader.exec_module(module)  # the plain import
        finally:
            _remove(placeholders)


def _remove(placeholders: dict[str, ModuleType]) -> None:
    for name, placeholder in placeholders.items():
        if sys.modules.get(name) is placeholder:
            del sys.modules[name]


class _KeyfileFinder(MetaPathFinder):
    """Finds eth_keyfile.keyfile as the path finder does, with the loader wrapped."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != KEYFILE_MODULE:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _KeyfileLoader(spec.loader)
        return spec


def defer_bls_keystores() -> bool:
    """Install the finder (once); returns whether the deferral can still take effect (False
    when eth_keyfile.keyfile is imported already). Raises nothing."""
    if KEYFILE_MODULE in sys.modules:
        return False
    if not any(isinstance(finder, _KeyfileFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _KeyfileFinder())
    return True
