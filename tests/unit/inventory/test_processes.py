from __future__ import annotations

from contain.inventory.processes import (
    CAPABILITY_NAMES,
    DAEMON_SOCKETS,
    classify_processes,
    decode_capabilities,
    gather_process_facts,
    parse_unix_listeners,
)

from .conftest import FakeHost


def test_capability_table_matches_the_kernel_numbering() -> None:
    assert CAPABILITY_NAMES[21] == "CAP_SYS_ADMIN" and CAPABILITY_NAMES[40] == ("CAP_CHECKPOINT_RESTORE")
    assert decode_capabilities(0x200000) == ("CAP_SYS_ADMIN",)
    assert decode_capabilities(1 << 50) == ("CAP_50",)
    assert len(decode_capabilities(0x1FFFFFFFFFF)) == 41


def test_unix_listeners_include_abstract_and_skip_connected_sockets() -> None:
    text = (
        "Num RefCount Protocol Flags Type St Inode Path\n"
        "0: 00000002 00000000 00010000 0001 01 1 /run/a.sock\n"
        "0: 00000002 00000000 00010000 0001 01 2 @abstract\n"
        "0: 00000003 00000000 00000000 0001 03 3 /run/b.sock\n"
        "0: 00000002 00000000 00010000 0001 01 4\n"
    )
    assert parse_unix_listeners(text) == ("/run/a.sock", "@abstract")


def test_every_daemon_socket_row_is_found_when_its_socket_exists(fake_host: FakeHost) -> None:
    runtime = fake_host.base / "u"
    for row in DAEMON_SOCKETS:
        template = row.paths[0]
        if template.startswith("{runtime}/"):
            path = runtime / template.removeprefix("{runtime}/")
        else:
            path = fake_host.root / template
        if not path.exists():
            fake_host.unix_socket(path)
    facts = gather_process_facts(environ=fake_host.environ, root=fake_host.root, proc_root=fake_host.proc)
    kinds = {s.kind for s in facts.sockets}
    assert {row.kind for row in DAEMON_SOCKETS} | {"ssh-agent", "x11"} <= kinds


def test_a_regular_file_at_a_socket_path_is_not_a_socket(fake_host: FakeHost) -> None:
    (fake_host.root / "run" / "containerd").mkdir(parents=True)
    (fake_host.root / "run" / "containerd" / "containerd.sock").write_text("")
    facts = gather_process_facts(environ={}, root=fake_host.root, proc_root=fake_host.proc)
    assert "containerd" not in {s.kind for s in facts.sockets}


def test_processes_are_counted_with_owner_names(fake_host: FakeHost) -> None:
    facts = gather_process_facts(environ={}, root=fake_host.root, proc_root=fake_host.proc)
    assert len(facts.process_owners) == 3 and facts.euid == 1000
    items = {i.kind: i for i in classify_processes(facts)}
    assert items["capabilities"].reason.startswith("1 capabilities held, including CAP_SYS_ADMIN")
    assert "root-user" not in items
