"""`contain k8s render -o DIR|- [--runtime-class ...] [--seccomp ...] MANIFEST [-- COMMAND...]`.

Exit status: 0 when everything was written; 125 when the manifest is invalid, a flag value is
invalid, or the boundary cannot be rendered without weakening it (``RenderRefused``, rendered by
``contain.cli.main`` with cause and fix). Nothing is written unless the whole render succeeded.

Terminal output: the list of files written and the node requirements go to stderr when the YAML
stream is on stdout (``-o -``), to stdout otherwise; paths pass through ``for_terminal``.
"""

from __future__ import annotations

import argparse
import sys

from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="k8s_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="render a boundary as a Pod, NetworkPolicies and its egress proxy")
    render.add_argument("manifest", help="path to contain.yaml")
    render.add_argument("-o", "--output", required=True, metavar="DIR|-", help="directory to write, or - for stdout")
    render.add_argument("--runtime-class", choices=("gvisor", "kata"), help="override kubernetes.runtime_class")
    render.add_argument("--seccomp", choices=("localhost", "runtime-default"), help="override kubernetes.seccomp")
    render.add_argument("--namespace", metavar="NS", help="override kubernetes.namespace")
    render.add_argument("--image", metavar="IMAGE", help="override kubernetes.image (the workload image)")
    render.add_argument("--proxy-image", metavar="IMAGE", help="override kubernetes.proxy_image")
    render.add_argument(
        "--validate",
        action="store_true",
        help="check every object against the pinned Kubernetes schema before writing (needs contain[k8s])",
    )
    render.add_argument(
        "workload", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...] (default: the image's entrypoint)"
    )


def execute(args: argparse.Namespace) -> int:
    from contain.boundary import load_boundary
    from contain.errors import RenderRefused
    from contain.k8s import render_boundary, render_yaml_stream, write_render

    command = list(args.workload)
    if command and command[0] == "--":
        command = command[1:]
    elif command and command[0].startswith("-"):  # REMAINDER took an option written after MANIFEST
        raise RenderRefused(
            f"unexpected {command[0]!r} after the manifest",
            "put options before MANIFEST and the command after --: contain k8s render -o out m.yaml -- CMD",
            rule_id="k8s.usage",
        )
    boundary = load_boundary(args.manifest)
    overrides = {
        "runtime_class": args.runtime_class,
        "seccomp": args.seccomp,
        "namespace": args.namespace,
        "image": args.image,
        "proxy_image": args.proxy_image,
    }
    render = render_boundary(boundary, overrides=overrides, command=command)
    if args.validate:
        from contain.k8s.validate import validate_render

        validate_render(render)
    if args.output == "-":
        text = render_yaml_stream(render)
        sys.stdout.write(text)
        report = sys.stderr
    else:
        written = write_render(render, args.output)
        report = sys.stdout
        for path in written:
            print(f"wrote {for_terminal(args.output)}/{for_terminal(path)}", file=report)
    for line in render.requirements:
        print(f"node requirement: {line}", file=report)
    return 0
