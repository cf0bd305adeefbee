"""The container backend's parts: local images unpacked into a content-addressed read-only cache,
and OCI runtime spec pieces rendered from contain's own tables."""

from contain.runtime.container.image import (
    MEMBER_RULES,
    ImageConfig,
    ImageFormat,
    MemberFacts,
    ReportEntry,
    UnpackedImage,
    UnpackLimits,
    UnpackReport,
    plan_member,
    unpack_image,
)
from contain.runtime.container.oci_seccomp import OCI_ARCHES, render_oci_seccomp

__all__ = [
    "MEMBER_RULES",
    "OCI_ARCHES",
    "ImageConfig",
    "ImageFormat",
    "MemberFacts",
    "ReportEntry",
    "UnpackLimits",
    "UnpackReport",
    "UnpackedImage",
    "plan_member",
    "render_oci_seccomp",
    "unpack_image",
]
