"""The bwrap argv is planned from facts alone; compare it whole."""

from contain.boundary import Boundary, FileRule
from contain.runtime.bwrap import BwrapInputs, plan_bwrap_argv
from contain.runtime.paths import BindFacts, Mask, PathFacts


def inputs(paths: PathFacts, **extra) -> BwrapInputs:
    base = dict(
        paths=paths,
        loader_links={"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
        loader_dirs=(),
        etc_tree="/cache/etc-1234",
        supervisor_host_path="/cache/contain-supervisor-x",
        supervisor_args=("--control-fd", "5"),
        data_fds={"/.contain/token": 7},
        empty_file_fd_for={},
        seccomp_fd=6,
        info_fd=4,
        disk_root="/cache/disk-budget",
    )
    base.update(extra)
    return BwrapInputs(**base)


PROLOGUE = [
    "bwrap", "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
    "--uid", "1000", "--gid", "1000", "--hostname", "sandbox", "--disable-userns", "--cap-drop", "ALL",
    "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
    "--info-fd", "4", "--seccomp", "6",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64",
    "--ro-bind", "/cache/etc-1234", "/etc",
    "--perms", "0444", "--ro-bind-data", "7", "/.contain/token",
    "--proc", "/proc", "--dev", "/dev",
]


def test_the_default_boundary_gets_an_empty_read_only_root_with_scratch_and_tmp_on_one_budget():
    argv = plan_bwrap_argv(Boundary(), inputs(PathFacts((), ())))
    assert argv == PROLOGUE + [
        "--bind", "/cache/disk-budget/tmp", "/tmp",
        "--bind", "/cache/disk-budget/shm", "/dev/shm",
        "--bind", "/cache/disk-budget/scratch-0", "/work",
        "--remount-ro", "/dev",
        "--ro-bind", "/cache/contain-supervisor-x", "/.contain/supervisor",
        "--remount-ro", "/",
        "--", "/.contain/supervisor", "--control-fd", "5",
    ]


def test_binds_come_parent_first_then_protections_then_blocks():
    b = Boundary.model_validate(
        {
            "files": [
                {"host": "/h/repo/docs", "path": "/work/repo/docs", "access": "read"},
                {"host": "/h/repo", "path": "/work/repo", "access": "write"},
                {"path": "/work/out", "access": "scratch"},
                {"path": "/work/repo/secret.txt", "access": "block"},
            ]
        }
    )
    rules = {r.path: r for r in b.files}
    facts = PathFacts(
        binds=(
            BindFacts(rules["/work/repo/docs"], "/h/repo/docs", True),
            BindFacts(
                rules["/work/repo"], "/h/repo", True,
                (
                    Mask("/work/repo/.git/hooks", "/h/repo/.git/hooks", "dir", exists=True),
                    Mask("/work/repo/.bashrc", "/h/repo/.bashrc", "file", exists=False),
                    Mask("/work/repo/.vscode", "/h/repo/.vscode", "dir", exists=False),
                ),
            ),
        ),
        skipped=(),
        blocks={"/work/repo/secret.txt": "file"},
    )
    argv = plan_bwrap_argv(b, inputs(facts, empty_file_fd_for={"/work/repo/.bashrc": 8, "/work/repo/secret.txt": 9}))
    tail = argv[argv.index("/.contain/supervisor") + 1 :]
    assert argv[len(PROLOGUE) : len(PROLOGUE) + 11] == [
        "--bind", "/cache/disk-budget/tmp", "/tmp",
        "--bind", "/cache/disk-budget/shm", "/dev/shm",
        "--bind", "/cache/disk-budget/scratch-0", "/work/out",
        "--remount-ro", "/dev",
    ]
    assert tail == [
        "--bind", "/h/repo", "/work/repo",
        "--ro-bind", "/h/repo/docs", "/work/repo/docs",
        "--ro-bind", "/h/repo/.git/hooks", "/work/repo/.git/hooks",
        "--perms", "0444", "--ro-bind-data", "8", "/work/repo/.bashrc",
        "--perms", "0555", "--tmpfs", "/work/repo/.vscode", "--remount-ro", "/work/repo/.vscode",
        "--perms", "0000", "--ro-bind-data", "9", "/work/repo/secret.txt",
        "--remount-ro", "/",
        "--", "/.contain/supervisor", "--control-fd", "5",
    ]


def test_every_namespace_is_unshared_without_try_variants():
    argv = plan_bwrap_argv(Boundary(), inputs(PathFacts((), ())))
    for flag in ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup"):
        assert flag in argv
    assert not any(arg.endswith("-try") for arg in argv)
    assert "--share-net" not in argv and "--unshare-all" not in argv


def test_file_rule_type_is_used_as_planned():
    assert FileRule.model_validate({"path": "/w", "access": "scratch"}).host is None


def test_hidden_sockets_are_covered_by_empty_unreadable_files_after_the_binds():
    b = Boundary.model_validate({"files": [{"host": "/h/home", "path": "/inputs/home", "access": "read"}]})
    facts = PathFacts(
        binds=(BindFacts(b.files[0], "/h/home", True),),
        skipped=(),
        hidden_sockets=("/inputs/home/.gnupg/S.gpg-agent",),
    )
    argv = plan_bwrap_argv(b, inputs(facts, empty_file_fd_for={"/inputs/home/.gnupg/S.gpg-agent": 8}))
    tail = argv[argv.index("/.contain/supervisor") + 1 :]
    assert tail == [
        "--ro-bind", "/h/home", "/inputs/home",
        "--perms", "0000", "--ro-bind-data", "8", "/inputs/home/.gnupg/S.gpg-agent",
        "--remount-ro", "/",
        "--", "/.contain/supervisor", "--control-fd", "5",
    ]


def test_no_writable_tmpfs_is_mounted_by_bwrap_and_dev_ends_read_only():
    """Every tmpfs bwrap makes is remounted read-only (masks, blocks); writable places are binds."""
    b = Boundary.model_validate({"files": [{"path": "/work/a", "access": "scratch"}, {"path": "/w/b", "access": "scratch"}]})
    argv = plan_bwrap_argv(b, inputs(PathFacts((), ())))
    assert "--size" not in argv
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    remounted = {argv[i + 1] for i, a in enumerate(argv) if a == "--remount-ro"}
    assert set(tmpfs) <= remounted
    assert argv.index("/dev/shm") < argv.index("--remount-ro") and argv[argv.index("--remount-ro") + 1] == "/dev"
