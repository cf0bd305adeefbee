"""Kubernetes rendering: a boundary as a hardened Pod, NetworkPolicies and an egress proxy.

Pure planning in ``names``, ``refusals``, ``pod``, ``network`` and ``proxy``; the orchestrator
is ``render.render_boundary``; ``write`` is the only module that touches the file system.
See docs/k8s.md for what is rendered, what is validated, and what is not tested live.
"""

from contain.k8s.names import K8sNames, plan_names
from contain.k8s.refusals import RENDER_REFUSALS, RefusalHit, RenderRefusal, refusal_hits
from contain.k8s.render import (
    NODE_REQUIREMENTS,
    K8sRender,
    NodeRequirement,
    RenderedFile,
    RenderedObject,
    apply_overrides,
    plan_render,
    render_boundary,
)
from contain.k8s.write import render_yaml_stream, write_render

__all__ = [
    "NODE_REQUIREMENTS",
    "RENDER_REFUSALS",
    "K8sNames",
    "K8sRender",
    "NodeRequirement",
    "RefusalHit",
    "RenderRefusal",
    "RenderedFile",
    "RenderedObject",
    "apply_overrides",
    "plan_names",
    "plan_render",
    "refusal_hits",
    "render_boundary",
    "render_yaml_stream",
    "write_render",
]
