"""Container backend pieces: local images unpacked into a content-addressed read-only cache."""

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

__all__ = [
    "MEMBER_RULES",
    "ImageConfig",
    "ImageFormat",
    "MemberFacts",
    "ReportEntry",
    "UnpackLimits",
    "UnpackReport",
    "UnpackedImage",
    "plan_member",
    "unpack_image",
]
