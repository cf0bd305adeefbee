"""The smallest sandbox the tests build with bwrap by hand (not contain's own plan, runtime/bwrap.py).

Every namespace unshared, the host's /usr read-only and the loader's links into it. tests/conftest.py
tries it to decide whether ``needs_bwrap`` tests can run here; test_seccomp_enforced.py runs its
probes in it, so the skip check and those tests ask the kernel for the same namespaces.
"""

from __future__ import annotations

USR_ONLY_SANDBOX = (
    "--unshare-all",
    "--die-with-parent",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/lib", "/lib",
)  # fmt: skip
