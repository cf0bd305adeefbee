"""The container backend's parts: OCI runtime spec pieces rendered from contain's own tables."""

from contain.runtime.container.oci_seccomp import OCI_ARCHES, render_oci_seccomp

__all__ = ["OCI_ARCHES", "render_oci_seccomp"]
