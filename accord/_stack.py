"""The interpreter's recursion limit, kept where it was against py_ecc.

py_ecc, which eth_account imports (and so web3, and so every accord process that touches the
chain), raises the recursion limit of the whole process to 100,000 when it is first imported.
At that limit a JSON document nested 100,000 deep overflows the C stack inside `json.loads`:
the process dies of SIGSEGV instead of raising RecursionError. Such a document is 100 KB, so
one request body from anyone (the service parses JSON before it checks a signature on some
routes) or one answer from a hostile RPC node killed an accord service.

`keep_recursion_limit()`, called by the `accord` command and the service
(`accord._process.prepare_process`) before anything heavy loads, never by `import accord`,
imports py_ecc's package first (the package alone is cheap: eth_account loads its heavy parts)
and puts the limit back. py_ecc runs its package code once per process, so no later import
raises it again. accord never calls py_ecc, which is what wanted the deep recursion.
"""

from __future__ import annotations

import sys
from importlib import import_module

PYTHON_DEFAULT_LIMIT = 1_000
PY_ECC_LIMIT = 100_000


def keep_recursion_limit() -> int:
    """Import py_ecc's package and restore the recursion limit it raises; returns the limit.

    The limit is put back to what it was before the import. When py_ecc was imported before
    accord (its limit is in force and the one before it is lost), it goes to Python's
    default. A process without py_ecc is left as it is. Raises nothing."""
    loaded_before = "py_ecc" in sys.modules
    before = sys.getrecursionlimit()
    try:
        import_module("py_ecc")
    except ImportError:
        return before
    if loaded_before:
        if before >= PY_ECC_LIMIT:
            sys.setrecursionlimit(PYTHON_DEFAULT_LIMIT)
    else:
        sys.setrecursionlimit(before)
    return sys.getrecursionlimit()
