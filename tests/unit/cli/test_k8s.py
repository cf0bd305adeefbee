"""`contain k8s render`: files written on success; on any bad input a clear error, exit code, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.terminal_kit import HOSTILE, assert_terminal_safe
from contain.cli import main

DIGEST = "ab" * 32
K8S = {"image": f"registry.test/tools@sha256:{DIGEST}", "proxy_image": f"registry.test/contain@sha256:{DIGEST}"}


def _manifest(tmp_path: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "version": 1,
        "task": "inv-1",
        "network": {"allow": [{"host": "api.example.com"}]},
        "kubernetes": dict(K8S),
    }
    data.update(changes)
    path = tmp_path / "contain.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def test_render_writes_every_file_and_lists_them_with_the_node_requirements(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    assert main(["k8s", "render", "-o", str(out), str(_manifest(tmp_path)), "--", "python3", "-c", "print(1)"]) == 0
    stdout = capsys.readouterr().out
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len(files) == 7 and files[-1].startswith("seccomp/inv-1-")
    assert all(f"wrote {out}/{name}" in stdout for name in files)
    assert "node requirement: " in stdout and "oci-seccomp" in stdout
    pod = yaml.safe_load((out / "90-pod-inv-1.yaml").read_text())
    assert pod["spec"]["containers"][0]["command"] == ["python3", "-c", "print(1)"]


def test_flags_override_the_manifest_and_validate_checks_the_schema(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["k8s", "render", "--validate", "--runtime-class", "kata", "--seccomp", "runtime-default"]
    argv += ["--namespace", "agents", "-o", "-", str(_manifest(tmp_path))]
    assert main(argv) == 0
    captured = capsys.readouterr()
    objects = list(yaml.safe_load_all(captured.out))
    assert {obj["metadata"]["namespace"] for obj in objects} == {"agents"}
    assert objects[-1]["spec"]["runtimeClassName"] == "kata"
    assert "disable_guest_seccomp" in captured.err  # requirements go to stderr when stdout is the stream


def _assert_refused(argv: list[str], out: Path, capsysbinary, *, code: int = 125) -> str:  # type: ignore[no-untyped-def]
    assert main(argv) == code
    captured = capsysbinary.readouterr()
    err = captured.err.decode()
    assert_terminal_safe(captured.out.decode() + err)
    assert captured.out == b"", "nothing may reach stdout"
    assert not out.exists(), "nothing may be written"
    return err


def test_an_unknown_runtime_class_is_a_usage_error(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as caught:
        main(["k8s", "render", "--runtime-class", "runc", "-o", str(out), str(_manifest(tmp_path))])
    assert caught.value.code == 2
    assert "invalid choice: 'runc'" in capsysbinary.readouterr().err.decode()
    assert not out.exists()


def test_an_unknown_runtime_class_in_the_manifest_is_refused(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path, kubernetes={**K8S, "runtime_class": "runc"})
    err = _assert_refused(["k8s", "render", "-o", str(out), str(manifest)], out, capsysbinary)
    assert "kubernetes.runtime_class" in err and "gvisor" in err


@pytest.mark.parametrize("namespace", [HOSTILE, "Kube-System", "ns\nkind: Secret", "a" * 64])
def test_a_hostile_namespace_flag_is_refused_and_shown_escaped(tmp_path: Path, capsysbinary, namespace: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    err = _assert_refused(
        ["k8s", "render", "--namespace", namespace, "-o", str(out), str(_manifest(tmp_path))], out, capsysbinary
    )
    assert "kubernetes.namespace" in err


@pytest.mark.parametrize("name", ["evil\x1b[2J", "Upper", "a.b"])
def test_a_hostile_object_name_in_the_manifest_is_refused(tmp_path: Path, capsysbinary, name: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path, kubernetes={**K8S, "name": name})
    err = _assert_refused(["k8s", "render", "-o", str(out), str(manifest)], out, capsysbinary)
    assert "kubernetes.name" in err


def test_a_task_name_that_is_not_a_kubernetes_name_is_refused_with_the_fix(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path, task="Invoices_2026")
    err = _assert_refused(["k8s", "render", "-o", str(out), str(manifest)], out, capsysbinary)
    assert "K8S-012" in err and "fix: " in err and "kubernetes.name" in err


def test_a_boundary_the_render_would_weaken_is_refused(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    manifest = _manifest(tmp_path, files=[{"path": "/work/repo", "access": "write", "host": str(tmp_path)}])
    err = _assert_refused(["k8s", "render", "-o", str(out), str(manifest)], out, capsysbinary)
    assert "K8S-001" in err


def test_a_localhost_profile_cannot_go_to_stdout(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    err = _assert_refused(["k8s", "render", "-o", "-", str(_manifest(tmp_path))], out, capsysbinary)
    assert "-o DIR" in err


def test_an_option_after_the_manifest_is_refused_with_the_usage(tmp_path: Path, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    err = _assert_refused(["k8s", "render", "-o", str(out), str(_manifest(tmp_path)), "--validate"], out, capsysbinary)
    assert "put options before MANIFEST" in err
