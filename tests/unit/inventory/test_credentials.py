from __future__ import annotations

from pathlib import Path

from contain.inventory.credentials import (
    CREDENTIAL_FILES,
    ENV_POINTERS,
    CredentialFacts,
    classify_credentials,
    gather_credential_facts,
    parse_dotenv,
)
from contain.inventory.items import Verdict


def test_every_credential_file_row_is_found_under_a_home(tmp_path: Path) -> None:
    for row in CREDENTIAL_FILES:
        path = tmp_path / row.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    facts = gather_credential_facts(home=tmp_path, environ={}, cwd=tmp_path / "nowhere")
    assert {f.kind for f in facts.files} == {row.kind for row in CREDENTIAL_FILES}


def test_every_env_pointer_row_finds_the_file_it_names(tmp_path: Path) -> None:
    environ = {}
    for pointer in ENV_POINTERS:
        target = tmp_path / pointer.variable.lower()
        if pointer.inside:
            (target / pointer.inside).parent.mkdir(parents=True)
            (target / pointer.inside).write_text("x")
        else:
            target.write_text("x")
        environ[pointer.variable] = str(target)
    facts = gather_credential_facts(home=tmp_path / "home", environ=environ, cwd=tmp_path)
    assert {f.kind for f in facts.files} == {p.kind for p in ENV_POINTERS}
    # the variables themselves are not reported again as secrets: the files are the items
    assert not [i for i in classify_credentials(facts) if i.kind.startswith("env-")]


def test_world_readable_credential_file_is_called_out(tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text("machine x")
    (tmp_path / ".netrc").chmod(0o644)
    items = classify_credentials(gather_credential_facts(home=tmp_path, environ={}, cwd=tmp_path))
    assert "world-readable" in items[0].reason


def test_secret_name_holding_a_path_is_review_not_a_value() -> None:
    items = classify_credentials(CredentialFacts((("VAULT_TOKEN_FILE", "/run/secrets/v"),), (), ()))
    assert [(i.kind, i.verdict, i.fingerprint) for i in items] == [("env-path", Verdict.REVIEW, None)]


def test_parse_dotenv_handles_export_quotes_and_comments() -> None:
    text = "# c\nexport A='1 2'\nB=\"x\"\n C = y \nnot a line\n9BAD=1\n"
    assert parse_dotenv(text) == (("A", "1 2"), ("B", "x"), ("C", "y"))


def test_dotenv_reason_lists_secret_names_never_values(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("API_KEY=s3cr3t-value-here\nDEBUG=true\n")
    items = classify_credentials(gather_credential_facts(home=tmp_path / "h", environ={}, cwd=tmp_path))
    assert len(items) == 1 and "API_KEY" in items[0].reason
    assert "s3cr3t" not in repr(items)
