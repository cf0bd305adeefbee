import pytest
from pydantic import ValidationError

from contain.boundary import PROTECTED_PATHS, Boundary, FileAccess


def test_default_boundary_denies_everything_but_finite_budgets():
    b = Boundary()
    assert b.files == () and b.network.allow == () and b.env == {} and b.credentials == ()
    assert not b.allows_network
    r = b.resources
    assert (r.wall_s, r.cpu_s, r.memory_bytes, r.pids_max) == (60.0, 30.0, 512 * 1024**2, 128)


def test_models_are_frozen():
    with pytest.raises(ValidationError):
        Boundary().task = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ([{"path": "/work/out", "access": "read"}], "needs host"),
        ([{"path": "/work/out", "access": "scratch", "host": "/tmp"}], "takes no host"),
        ([{"path": "work", "access": "scratch"}], "absolute"),
        ([{"path": "/work/../etc", "access": "scratch"}], "not normalised"),
        ([{"path": "/etc/x", "access": "scratch"}], "runtime owns"),
        ([{"path": "/proc/self", "access": "scratch"}], "runtime owns"),
        ([{"path": "/", "access": "scratch"}], "runtime owns"),
        ([{"path": "/w", "access": "scratch", "protect": [".git"]}], "only to access: write"),
        ([{"path": "/w", "access": "read", "host": "/x", "export": "/y"}], "only to access: scratch"),
        ([{"path": "/w", "access": "write", "host": "/x", "protect": ["../up"]}], "relative"),
        ([{"path": "/w", "access": "scratch"}, {"path": "/w", "access": "scratch"}], "listed twice"),
        ([{"path": "/w/secret", "access": "block"}], "not inside any read or write bind"),
        ([{"path": "/w", "access": "scratch", "bogus": 1}], "Extra inputs"),
        ([{"path": "/w", "access": "scratch", "allow_sockets": ["s.sock"]}], "only to read and write binds"),
        ([{"path": "/w", "access": "read", "host": "/x", "allow_sockets": ["/run/s.sock"]}], "relative"),
        ([{"path": "/w", "access": "read", "host": "/x", "allow_sockets": ["../s.sock"]}], "relative"),
    ],
)
def test_file_rules_refuse_contradictions(files, fragment):
    with pytest.raises(ValidationError) as info:
        Boundary.model_validate({"files": files})
    assert fragment in str(info.value)


def test_block_inside_a_bind_is_accepted():
    b = Boundary.model_validate(
        {
            "files": [
                {"host": "/data", "path": "/inputs/data", "access": "read"},
                {"path": "/inputs/data/secret", "access": "block"},
            ]
        }
    )
    assert [r.access for r in b.files] == [FileAccess.READ, FileAccess.BLOCK]


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"host": "*.com"}, "top-level domain"),
        ({"host": "*"}, "wildcard"),
        ({"host": "a.com", "ports": []}, "cannot be empty"),
        ({"host": "a.com", "ports": [70000]}, "outside 1-65535"),
        ({"host": "evil.com\x00.allowed.com"}, "control character"),
        ({"host": "user@evil.com"}, "'@'"),
    ],
)
def test_network_rules_refuse_broad_or_hostile_hosts(rule, fragment):
    with pytest.raises(ValidationError) as info:
        Boundary.model_validate({"network": {"allow": [rule]}})
    assert fragment in str(info.value)


def test_network_rules_canonicalise_and_default_to_443():
    b = Boundary.model_validate(
        {"network": {"allow": [{"host": "API.Example.com."}, {"host": "10.0.0.0/8", "ports": [80, 80]}]}}
    )
    assert [(r.host, r.ports) for r in b.network.allow] == [("api.example.com", (443,)), ("10.0.0.0/8", (80,))]
    assert b.allows_network


def test_credentials_via_env_need_a_source_and_cannot_shadow_env():
    with pytest.raises(ValidationError, match="needs source"):
        Boundary.model_validate({"credentials": [{"name": "T", "via": "env"}]})
    with pytest.raises(ValidationError, match="declared once"):
        Boundary.model_validate({"credentials": [{"name": "T"}], "env": {"T": "x"}})


def test_resources_accept_units_and_refuse_unbounded_values():
    b = Boundary.model_validate({"resources": {"memory_bytes": "1GiB", "wall_s": "2m", "disk_bytes": 1 << 20}})
    assert (b.resources.memory_bytes, b.resources.wall_s) == (1 << 30, 120.0)
    for bad in ({"memory_bytes": "1KiB"}, {"pids_max": 0}, {"wall_s": 0}, {"cpu_s": "forever"}):
        with pytest.raises(ValidationError):
            Boundary.model_validate({"resources": bad})


def test_every_protected_path_row_has_a_reason_and_a_kind():
    assert PROTECTED_PATHS
    for row in PROTECTED_PATHS:
        assert row.why and row.kind in ("dir", "file") and not row.path.startswith("/")


def test_tool_and_record_rules_are_validated_now():
    b = Boundary.model_validate(
        {
            "tools": [{"name": "billing.update_*", "verdict": "review", "args": {"amount": {"maximum": 1000}}}],
            "records": [{"name": "invoices", "actions": ["update_invoice"]}],
        }
    )
    assert b.tools[0].args["amount"].maximum == 1000
    with pytest.raises(ValidationError):
        Boundary.model_validate({"tools": [{"name": "x", "verdict": "maybe"}]})
    with pytest.raises(ValidationError):
        Boundary.model_validate({"records": [{"name": "invoices", "actions": []}]})
    with pytest.raises(ValidationError):
        Boundary.model_validate(
            {"tools": [{"name": "x", "verdict": "allow", "args": {"a": {"minimum": 5, "maximum": 1}}}]}
        )
