from __future__ import annotations

from pathlib import Path

from contain.inventory.records import _PARSERS, RecordFacts, classify_records

EXAMPLES = {
    "kube-config": (
        "clusters: [{name: c, cluster: {server: 'https://u:p@k.test:6443'}}]\n"
        "contexts: [{name: ctx, context: {cluster: c}}]\n",
        "https://u@k.test:6443",
    ),
    "docker-config": ('{"auths": {"r.test": {"auth": "eDp5"}}, "credHelpers": {"g.test": "gc"}}', "g.test"),
    "podman-auth": ('{"auths": {"quay.test": {"auth": "eDp5"}}}', "quay.test"),
    "netrc": ("machine m.test login u password p\n", "m.test"),
    "git-credentials": ("https://u:tok@git.test\n", "https://u@git.test"),
    "gh-hosts": ("github.test:\n  oauth_token: t\n", "github.test"),
    "npmrc": ("//npm.test/:_authToken=t\n", "npm.test"),
    "pypirc": (
        "[distutils]\nindex-servers = t\n[t]\nrepository = https://up.test/legacy/\npassword = p\n",
        "https://up.test/legacy/",
    ),
    "pgpass": ("db.test:5432:app:bob:pw\n", "postgres://bob@db.test:5432/app"),
    "aws-credentials": ("[default]\naws_access_key_id = x\n", "AWS APIs"),
    "aws-config": ("[profile dev]\nregion = eu-west-1\n", "AWS APIs"),
}


def test_every_parser_row_has_an_example_and_keeps_secrets_out() -> None:
    assert set(EXAMPLES) == set(_PARSERS)
    for kind, (text, location) in EXAMPLES.items():
        items = classify_records(RecordFacts((), ((kind, Path("/h/f"), text),)))
        assert location in {i.location for i in items}, kind
        for item in items:
            assert ":p@" not in item.location and "tok" not in item.location
            assert ":pw" not in item.location


def test_unparseable_file_is_still_a_record() -> None:
    items = classify_records(RecordFacts((), (("docker-config", Path("/h/c.json"), "{oops"),)))
    assert [(i.kind, i.location) for i in items] == [("docker-config", "/h/c.json")]


def test_database_urls_and_pg_variables_name_the_host_without_password() -> None:
    facts = RecordFacts(
        (
            ("environment", "REDIS_URL", "rediss://:pw@cache.test:6380/0"),
            ("environment", "PGHOST", "pg.test"),
            ("environment", "PGUSER", "app"),
            ("environment", "PGPASSWORD", "pw"),
        ),
        (),
    )
    locations = {i.location for i in classify_records(facts)}
    assert locations == {"rediss://cache.test:6380/0", "postgres://app@pg.test:5432/"}
