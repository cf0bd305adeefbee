"""The cached /etc tree: built once per content, rebuilt on change, public files only."""

import os

from contain.runtime.etc_tree import ensure_etc_tree


def test_the_tree_holds_generated_files_and_public_copies_and_is_reused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    generated = {"/etc/passwd": "sandbox:x:1000:1000::/work:/bin/sh\n"}
    tree = ensure_etc_tree(cache, generated, ["/etc/ld.so.cache"])
    with open(os.path.join(tree, "passwd")) as handle:
        assert handle.read() == generated["/etc/passwd"]
    with open(os.path.join(tree, "ld.so.cache"), "rb") as copy, open("/etc/ld.so.cache", "rb") as original:
        assert copy.read() == original.read()
    assert oct(os.stat(tree).st_mode & 0o777) == "0o755"
    assert ensure_etc_tree(cache, generated, ["/etc/ld.so.cache"]) == tree  # same content, same tree
    other = ensure_etc_tree(cache, {"/etc/passwd": "changed\n"}, ["/etc/ld.so.cache"])
    assert other != tree


def test_only_world_readable_files_are_copied_and_symlinks_stay_symlinks(tmp_path):
    from contain.runtime import etc_tree

    source = tmp_path / "src"
    (source / "d").mkdir(parents=True)
    (source / "d" / "public").write_text("p")
    (source / "d" / "public").chmod(0o644)
    (source / "d" / "secret").write_text("s")
    (source / "d" / "secret").chmod(0o600)
    (source / "d" / "link").symlink_to("/etc/hostname")
    target = tmp_path / "out"
    etc_tree._copy_public(str(source / "d"), str(target))
    assert sorted(os.listdir(target)) == ["link", "public"]
    assert os.readlink(target / "link") == "/etc/hostname"


def test_a_changed_passthrough_file_gives_a_new_key(tmp_path):
    from contain.runtime.etc_tree import _tree_key

    f = tmp_path / "ld.so.cache"
    f.write_text("v1")
    first = _tree_key({}, [str(f)])
    f.write_text("version 2")
    assert _tree_key({}, [str(f)]) != first
