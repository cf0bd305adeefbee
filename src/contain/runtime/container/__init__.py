"""The container backend's parts: local images unpacked into a content-addressed read-only cache,
the OCI bundle planned from the process backend's plan, and OCI runtime spec pieces rendered from
contain's own tables."""

from contain.runtime.container.bundle import (
    PROC_PATH_RULES,
    BundleFile,
    BundleInputs,
    BundlePlan,
    ProcPathRule,
    RootfsEntry,
    plan_oci_bundle,
)
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
    "PROC_PATH_RULES",
    "BundleFile",
    "BundleInputs",
    "BundlePlan",
    "ImageConfig",
    "ImageFormat",
    "MemberFacts",
    "ProcPathRule",
    "ReportEntry",
    "RootfsEntry",
    "UnpackLimits",
    "UnpackReport",
    "UnpackedImage",
    "plan_member",
    "plan_oci_bundle",
    "render_oci_seccomp",
    "unpack_image",
]
