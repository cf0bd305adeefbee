import pytest

from contain.boundary import Boundary
from contain.boundary.extend import BoundaryFlags, extend_boundary
from contain.errors import BoundaryInvalid


def test_flags_add_binds_env_hosts_and_resources(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    b = extend_boundary(
        Boundary(),
        BoundaryFlags(
            reads=[str(data)],
            writes=[f"{tmp_path}:/work/repo"],
            env=["A=1"],
            allow_hosts=["pypi.org", "api.test:8443"],
            resources={"memory_bytes": "256MiB"},
        ),
    )
    assert [(r.path, r.access.value, r.host) for r in b.files] == [
        ("/inputs/data", "read", str(data)),
        ("/work/repo", "write", str(tmp_path)),
    ]
    assert b.env == {"A": "1"}
    assert [(r.host, r.ports) for r in b.network.allow] == [("pypi.org", (443,)), ("api.test", (8443,))]
    assert b.resources.memory_bytes == 256 * 1024**2


def test_flags_are_validated_like_a_manifest():
    with pytest.raises(BoundaryInvalid, match="top-level domain"):
        extend_boundary(Boundary(), BoundaryFlags(allow_hosts=["*.com"]))
    with pytest.raises(ValueError, match="NAME=VALUE"):
        extend_boundary(Boundary(), BoundaryFlags(env=["novalue"]))
    with pytest.raises(BoundaryInvalid, match="runtime owns"):
        extend_boundary(Boundary(), BoundaryFlags(reads=["/etc:/etc"]))
