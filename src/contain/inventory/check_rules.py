"""The rules of ``contain check``: one table row per rule, with its severity, reason and fix.

Each ``CheckRule`` pairs a reason with a pure predicate over the ``Boundary`` and the few host
facts the check gathered first (``CheckFacts``: resolved bind paths, the real home, credential
files and hook runners that exist inside binds). Tests iterate ``CHECK_RULES`` so that every row
has a manifest that trips it and stays silent on a clean one.

Decisions written down here:

* A write bind of a git repository is not flagged by itself: contain always keeps the
  ``PROTECTED_PATHS`` defaults (``.git`` as a repository unit, rc files…) read-only. What is flagged
  (CHK-013) is a *hook runner the defaults do not cover* that would be writable: a
  ``core.hooksPath`` inside the bind, ``.husky``, ``.githooks``, ``.pre-commit-config.yaml``,
  ``lefthook.yml`` — editing those runs code as the user on the next commit.
* "No resource limits" cannot happen (every budget has a finite default), so CHK-014 is
  ``info``: the budgets were left at the defaults and were not sized for the task.
* "Generated code with no runtime boundary": ``runtime.backend: none`` with the generated_code
  threat (CHK-017); the weakest runtime short of that is ``hardening: {landlock: off, cgroups:
  off}`` (CHK-012).
* A microVM or container isolates the host kernel, not what is mounted into it: a writable host
  directory (CHK-018) or a long-lived secret (CHK-019) is as exposed as in a process sandbox.
* ``contain fleet`` reruns a job whose node died; only broker writes are deduplicated, so a
  manifest with a ``fleet:`` section that allows retries and binds a host directory writable is
  flagged (CHK-024). Without a ``fleet:`` section the rule stays silent (the defaults apply to
  every manifest, and most never run in a fleet).

A broker action without a business validator is a property of the broker, not of the manifest:
with ``contain check --broker-config broker.yaml`` the actions the manifest's records name are
looked up in the broker (CHK-020: registered without a business rule; CHK-021: not registered).

A manifest with a ``kubernetes:`` section is also checked against every ``contain.k8s.refusals``
row (ids ``K8S-0xx``, errors): what ``contain k8s render`` would refuse is reported here first,
with the same reason and fix. CHK-022 reports the settings; CHK-023 warns about images that are
not pinned by digest.

Why one file past 600 lines: it is one table, each rule's row beside its pure predicate; its
length is the number of rules, not a second mechanism.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from contain.boundary import (
    PROTECTED_PATHS,
    Backend,
    Boundary,
    CredentialVia,
    FileAccess,
    LayerRequirement,
    Resources,
    Threat,
    ToolVerdict,
)
from contain.boundary.plain import plain_boundary
from contain.inventory.network import METADATA_ADDRESSES
from contain.inventory.secrets import is_secret_name, secret_shape_of
from contain.k8s.refusals import RENDER_REFUSALS, RenderRefusal

__all__ = [
    "CHECK_RULES",
    "HOOK_RUNNERS",
    "METADATA_HOSTNAMES",
    "PUBLIC_SUFFIXES",
    "READ_VERBS",
    "WRITE_VERBS",
    "BindFacts",
    "CheckFacts",
    "CheckRule",
    "Hit",
    "HookRunner",
    "Severity",
    "tool_name_words",
]

KeyPath = tuple[str | int, ...]
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


class Severity(StrEnum):
    """How bad a finding is; ``error`` makes ``contain check`` exit 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Hit:
    """One place a rule fires: the manifest key path and what is wrong there (no secret values)."""

    key_path: KeyPath
    message: str


@dataclass(frozen=True)
class HookRunner:
    """A path inside a repository whose content runs as the user on a git command."""

    path: str
    why: str


HOOK_RUNNERS: tuple[HookRunner, ...] = (
    HookRunner(".husky", "husky sets core.hooksPath here; its scripts run on commit and push"),
    HookRunner(".githooks", "a conventional core.hooksPath directory"),
    HookRunner(".pre-commit-config.yaml", "pre-commit runs the commands it lists on every commit"),
    HookRunner("lefthook.yml", "lefthook runs the commands it lists on git hooks"),
    HookRunner(".lefthook.yml", "lefthook runs the commands it lists on git hooks"),
)


@dataclass(frozen=True)
class BindFacts:
    """What the host says about one read or write bind (``files[index]``)."""

    index: int
    resolved: Path  # realpath of the host path
    hook_paths: tuple[str, ...] = ()  # relative to the bind; repositories only
    credential_paths: tuple[str, ...] = ()  # relative to the bind


@dataclass(frozen=True)
class CheckFacts:
    """Host facts the rules need, gathered once by ``contain.inventory.check``."""

    home: Path  # resolved
    binds: tuple[BindFacts, ...] = field(default=())
    # with --broker-config: every action the broker registers -> whether it has a business rule
    broker_actions: Mapping[str, bool] | None = None


@dataclass(frozen=True)
class CheckRule:
    """One lint rule: a row with its reason, fix and predicate."""

    id: str
    severity: Severity
    title: str
    why: str
    fix: str
    check: Callable[[Boundary, CheckFacts], Iterable[Hit]]


# Suffixes under which anyone can register a name; a wildcard over one allows an attacker's host
# (exfiltration to attacker.github.io). A hand-kept subset of the Public Suffix List's private
# and country sections, https://publicsuffix.org/list/.
PUBLIC_SUFFIXES: frozenset[str] = frozenset(
    {
        "co.uk",
        "org.uk",
        "me.uk",
        "com.au",
        "net.au",
        "co.jp",
        "co.nz",
        "com.br",
        "com.cn",
        "co.in",
        "com.mx",
        "co.za",
        "github.io",
        "gitlab.io",
        "herokuapp.com",
        "appspot.com",
        "amazonaws.com",
        "s3.amazonaws.com",
        "cloudfront.net",
        "azurewebsites.net",
        "blob.core.windows.net",
        "web.core.windows.net",
        "cloudapp.net",
        "firebaseapp.com",
        "web.app",
        "vercel.app",
        "netlify.app",
        "pages.dev",
        "workers.dev",
        "ngrok.io",
        "ngrok-free.app",
        "ngrok.app",
        "onrender.com",
        "fly.dev",
        "glitch.me",
        "repl.co",
        "trycloudflare.com",
        "googleusercontent.com",
        "storage.googleapis.com",
        "blogspot.com",
        "readthedocs.io",
    }
)
# Names that resolve to a metadata service on the clouds that define them.
METADATA_HOSTNAMES: frozenset[str] = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
# Verbs in a tool name that mean the call changes something outside the sandbox.
WRITE_VERBS: frozenset[str] = frozenset(
    {
        "write",
        "update",
        "delete",
        "remove",
        "create",
        "send",
        "post",
        "put",
        "patch",
        "exec",
        "execute",
        "run",
        "shell",
        "insert",
        "upload",
        "publish",
        "deploy",
        "merge",
        "push",
        "transfer",
        "pay",
        "email",
        "drop",
        "modify",
        "set",
        "edit",
        "move",
        "rename",
        "commit",
        "approve",
        "kill",
        "grant",
        "revoke",
        "invite",
        "submit",
        "apply",
        "install",
        "truncate",
    }
)
# Verbs that make a trailing glob safe (billing.read_* can only match reads).
READ_VERBS: frozenset[str] = frozenset(
    {
        "read",
        "get",
        "list",
        "search",
        "fetch",
        "query",
        "describe",
        "show",
        "view",
        "find",
        "lookup",
        "head",
        "stat",
        "count",
    }
)


def tool_name_words(name: str) -> list[str]:
    """Lower-case words of a tool name: split on . _ : / - and camelCase humps."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w.lower() for w in re.split(r"[._:/\-\s*]+", spaced) if w]


def _credential_via_env(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for i, cred in enumerate(boundary.credentials):
        if cred.via is CredentialVia.ENV:
            yield Hit(
                ("credentials", i, "via"), f"credential {cred.name} is copied from ${cred.source} into the sandbox"
            )


def _secret_in_env(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for name, value in boundary.env.items():
        shape = secret_shape_of(value)
        if shape is not None:
            yield Hit(("env", name), f"env {name} holds what looks like a {shape.title}")
        elif is_secret_name(name) and value.strip():
            yield Hit(("env", name), f"env {name} has a secret-looking name")


def _covers_home(resolved: Path, home: Path) -> bool:
    return resolved == Path("/") or resolved == home or resolved in home.parents


def _binds_of_home(access: FileAccess) -> Callable[[Boundary, CheckFacts], Iterable[Hit]]:
    def check(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
        for bind in facts.binds:
            rule = boundary.files[bind.index]
            if rule.access is access and _covers_home(bind.resolved, facts.home):
                what = "/" if bind.resolved == Path("/") else f"{bind.resolved} (home {facts.home})"
                yield Hit(("files", bind.index, "host"), f"{access.value} bind of {what} at {rule.path}")

    return check


def _blocked_relatives(boundary: Boundary, bind_path: str) -> list[str]:
    prefix = bind_path.rstrip("/") + "/"
    return [
        r.path.removeprefix(prefix)
        for r in boundary.files
        if r.access is FileAccess.BLOCK and r.path.startswith(prefix)
    ]


def _is_covered(relative: str, covers: Iterable[str]) -> bool:
    return any(relative == c or relative.startswith(c.rstrip("/") + "/") for c in covers)


def _exposed_credentials(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for bind in facts.binds:
        rule = boundary.files[bind.index]
        blocked = _blocked_relatives(boundary, rule.path)
        exposed = [p for p in bind.credential_paths if not _is_covered(p, blocked)]
        if exposed:
            listed = ", ".join(exposed[:6]) + (", …" if len(exposed) > 6 else "")
            yield Hit(
                ("files", bind.index, "host"),
                f"{rule.access.value} bind at {rule.path} shows credential files: {listed}",
            )


def _wildcard_domain(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for i, net in enumerate(boundary.network.allow):
        if net.host.startswith("*.") and net.host[2:] not in PUBLIC_SUFFIXES:
            yield Hit(
                ("network", "allow", i, "host"), f"{net.host} allows every current and future name under {net.host[2:]}"
            )


def _public_suffix_wildcard(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for i, net in enumerate(boundary.network.allow):
        if net.host.startswith("*.") and net.host[2:] in PUBLIC_SUFFIXES:
            suffix = net.host[2:]
            yield Hit(("network", "allow", i, "host"), f"{net.host} is a wildcard over the public suffix {suffix}")


def _as_network(host: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(host, strict=False)
    except ValueError:
        return None


def _wide_address_range(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    for i, net in enumerate(boundary.network.allow):
        network = _as_network(net.host)
        if network is not None and network.num_addresses > 1:
            yield Hit(("network", "allow", i, "host"), f"{net.host} allows {network.num_addresses} addresses")


def _metadata_allowed(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    metadata = [ipaddress.ip_address(m.address) for m in METADATA_ADDRESSES]
    for i, net in enumerate(boundary.network.allow):
        network = _as_network(net.host)
        if network is not None and any(a in network for a in metadata if a.version == network.version):
            yield Hit(("network", "allow", i, "host"), f"{net.host} covers a metadata address")
        elif net.host in METADATA_HOSTNAMES:
            yield Hit(("network", "allow", i, "host"), f"{net.host} is a metadata service name")
    for name, address in boundary.network.hosts.items():
        if ipaddress.ip_address(address) in metadata:
            yield Hit(("network", "hosts", name), f"{name} is pinned to metadata address {address}")


def _is_open_glob(name: str) -> bool:
    if "*" not in name:
        return False
    words = tool_name_words(name.split("*", 1)[0])
    return not words or words[-1] not in READ_VERBS


def _untrusted_allow_write(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if Threat.UNTRUSTED_DOCUMENTS not in boundary.threats:
        return
    for i, tool in enumerate(boundary.tools):
        if tool.verdict is not ToolVerdict.ALLOW:
            continue
        verbs = sorted(set(tool_name_words(tool.name)) & WRITE_VERBS)
        if verbs:
            yield Hit(("tools", i, "verdict"), f"tool {tool.name} ({'/'.join(verbs)}) is allowed without review")
        elif _is_open_glob(tool.name):
            yield Hit(("tools", i, "verdict"), f"tool pattern {tool.name} is allowed and can match write tools")


def _records_without_principal(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if boundary.records and not boundary.principal:
        names = ", ".join(r.name for r in boundary.records)
        yield Hit(("records", 0), f"records ({names}) are declared but principal is not")


def _weakened_runtime(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    hard = boundary.hardening
    if (
        Threat.GENERATED_CODE in boundary.threats
        and hard.landlock is LayerRequirement.OFF
        and hard.cgroups is LayerRequirement.OFF
    ):
        yield Hit(("hardening",), "generated_code runs with landlock: off and cgroups: off")


def _writable_hook_runner(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    defaults = [p.path for p in PROTECTED_PATHS]
    for bind in facts.binds:
        rule = boundary.files[bind.index]
        if rule.access is not FileAccess.WRITE:
            continue
        covers = [*defaults, *rule.protect, *_blocked_relatives(boundary, rule.path)]
        for hook in bind.hook_paths:
            if not _is_covered(posixpath.normpath(hook), covers):
                yield Hit(
                    ("files", bind.index, "protect"), f"{hook} in the write-bound repository at {rule.path} is writable"
                )


def _default_resources(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if boundary.resources == Resources():
        yield Hit(("resources",), "every budget is the default")


def _no_threats(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if not boundary.threats:
        yield Hit(("threats",), "threats is empty")


def _untrusted_with_egress(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if Threat.UNTRUSTED_DOCUMENTS in boundary.threats and boundary.network.allow:
        hosts = ", ".join(n.host for n in boundary.network.allow[:4])
        yield Hit(("network", "allow"), f"untrusted documents can steer requests to {hosts}")


def _generated_code_without_runtime(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if Threat.GENERATED_CODE in boundary.threats and boundary.runtime.backend is Backend.NONE:
        yield Hit(("runtime", "backend"), "generated code is declared to run with no runtime boundary")


def _guest_backend(boundary: Boundary) -> bool:
    return boundary.runtime.backend in (Backend.CONTAINER, Backend.MICROVM)


def _write_bind_hosts(boundary: Boundary) -> Iterable[tuple[KeyPath, str | None]]:
    """Each ``files`` rule with ``access: write``: the key path of its access and its host directory."""
    for i, rule in enumerate(boundary.files):
        if rule.access is FileAccess.WRITE:
            yield ("files", i, "access"), rule.host


def _guest_writable_host_dir(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if not _guest_backend(boundary):
        return
    for key_path, host in _write_bind_hosts(boundary):
        yield Hit(key_path, f"host directory {host} is mounted writable into the {boundary.runtime.backend.value}")


def _fleet_retries_with_write_binds(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    # Only a manifest that writes a fleet: section is meant for `contain fleet`; the defaults
    # (retries: 2) apply to every manifest and would make this fire on any write bind.
    if "fleet" not in boundary.model_fields_set or boundary.fleet.retries == 0:
        return
    for key_path, host in _write_bind_hosts(boundary):
        yield Hit(key_path, f"fleet.retries is {boundary.fleet.retries} and host directory {host} is bound writable")


def _guest_long_lived_secret(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if not _guest_backend(boundary):
        return
    for i, cred in enumerate(boundary.credentials):
        if cred.via is CredentialVia.ENV:
            yield Hit(
                ("credentials", i, "via"),
                f"credential {cred.name} is handed into the {boundary.runtime.backend.value} for its whole life",
            )


def _record_actions(boundary: Boundary) -> Iterable[tuple[int, int, str]]:
    for i, record in enumerate(boundary.records):
        for j, action in enumerate(record.actions):
            yield i, j, action


def _broker_action_without_validator(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if facts.broker_actions is None:
        return
    for i, j, action in _record_actions(boundary):
        if facts.broker_actions.get(action) is False:
            yield Hit(("records", i, "actions", j), f"broker action {action} has no business validator")


def _record_action_not_in_broker(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    if facts.broker_actions is None:
        return
    for i, j, action in _record_actions(boundary):
        if action not in facts.broker_actions:
            yield Hit(("records", i, "actions", j), f"the broker does not register an action named {action}")


def _k8s_refusal(row: RenderRefusal) -> Callable[[Boundary, CheckFacts], Iterable[Hit]]:
    """A ``contain.k8s.refusals`` row as a check: fires only for a manifest with a kubernetes: section."""

    def check(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
        if boundary.kubernetes is None:
            return
        for key_path, message in row.check(plain_boundary(boundary), boundary.kubernetes):
            yield Hit(key_path, message)

    return check


def _k8s_settings(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    k8s = boundary.kubernetes
    if k8s is None:
        return
    stem = k8s.name or boundary.task
    yield Hit(
        ("kubernetes",),
        f"renders Pod {k8s.namespace}/{stem} under RuntimeClass {k8s.runtime_class_object} "
        f"({k8s.runtime_class.value}), seccomp {k8s.seccomp.value}, uid {k8s.run_as_user}, {k8s.arch.value} nodes, "
        f"{len(k8s.inputs)} input volume(s)",
    )


def _k8s_unpinned_images(boundary: Boundary, facts: CheckFacts) -> Iterable[Hit]:
    k8s = boundary.kubernetes
    if k8s is None:
        return
    for key in ("image", "proxy_image"):
        if key == "proxy_image" and not boundary.allows_network:
            continue  # no proxy is rendered without network
        value = getattr(k8s, key)
        if value is None:
            yield Hit(("kubernetes", key), f"kubernetes.{key} is not set; the render needs it from the command line")
        elif not _DIGEST.search(value):
            yield Hit(("kubernetes", key), f"kubernetes.{key} {value} is not pinned by digest")


CHECK_RULES: tuple[CheckRule, ...] = (
    CheckRule(
        "CHK-001",
        Severity.ERROR,
        "credential visible inside the sandbox",
        "via: env copies the secret into the sandbox, where generated code or a prompt injection can read and send it",
        "use via: broker and let a broker action use the secret",
        _credential_via_env,
    ),
    CheckRule(
        "CHK-002",
        Severity.ERROR,
        "secret in the sandbox environment",
        "env values are copied into every sandbox and end up in logs and child processes",
        "move it under credentials with via: broker",
        _secret_in_env,
    ),
    CheckRule(
        "CHK-003",
        Severity.ERROR,
        "write bind of a home directory or /",
        "the task could plant shell start-up files, keys and hooks that run as the user",
        "bind only the project directory, or use scratch with export",
        _binds_of_home(FileAccess.WRITE),
    ),
    CheckRule(
        "CHK-004",
        Severity.WARNING,
        "read bind of a home directory or /",
        "every file of the user (keys, tokens, history, mail) becomes readable",
        "bind only the directories the task reads",
        _binds_of_home(FileAccess.READ),
    ),
    CheckRule(
        "CHK-005",
        Severity.ERROR,
        "bind exposes credential files",
        "ssh keys, cloud credentials and .env files inside a bind are readable by the task",
        "add {path: <bind>/<file>, access: block} for each, or bind a narrower directory",
        _exposed_credentials,
    ),
    CheckRule(
        "CHK-006",
        Severity.WARNING,
        "wildcard network rule",
        "a wildcard allows names that do not exist yet, including ones an attacker can "
        "create on a shared service of that domain",
        "list the exact hosts the task needs",
        _wildcard_domain,
    ),
    CheckRule(
        "CHK-007",
        Severity.ERROR,
        "wildcard over a public suffix",
        "anyone can register a name under it, so data can be sent to an attacker's host",
        "list the exact hosts the task needs",
        _public_suffix_wildcard,
    ),
    CheckRule(
        "CHK-008",
        Severity.WARNING,
        "network rule wider than one address",
        "an address range allows hosts nobody reviewed",
        "allow single addresses (a /32 or /128) or names",
        _wide_address_range,
    ),
    CheckRule(
        "CHK-009",
        Severity.ERROR,
        "cloud metadata address allowed",
        "the metadata service hands out the host's cloud credentials to any caller",
        "remove the rule; a task that needs cloud access goes through the broker",
        _metadata_allowed,
    ),
    CheckRule(
        "CHK-010",
        Severity.ERROR,
        "untrusted documents with an allowed write tool",
        "a prompt injection in a document can make the agent call the tool with its arguments, and nobody looks first",
        "set verdict: review (or deny) for tools that change things",
        _untrusted_allow_write,
    ),
    CheckRule(
        "CHK-011",
        Severity.ERROR,
        "records without a principal",
        "the broker authorises writes against a principal; without one there is no "
        "policy to check and no name in the ledger",
        "set principal: to the person or service the writes are made for",
        _records_without_principal,
    ),
    CheckRule(
        "CHK-012",
        Severity.ERROR,
        "generated code on a weakened runtime",
        "with Landlock and cgroups both off, only namespaces and seccomp stand between "
        "generated code and the host, and nothing limits memory or processes",
        "set hardening.landlock and hardening.cgroups to auto or required",
        _weakened_runtime,
    ),
    CheckRule(
        "CHK-013",
        Severity.ERROR,
        "hook runner writable in a write-bound repository",
        "contain protects .git/hooks and .git/config, but a core.hooksPath, husky, "
        "pre-commit or lefthook file inside the repository runs code on the next commit",
        "add the path to protect: of this write rule",
        _writable_hook_runner,
    ),
    CheckRule(
        "CHK-014",
        Severity.INFO,
        "resource limits left at the defaults",
        "the defaults are finite but not sized for this task",
        "set resources: wall, cpu, memory, pids and disk for what the task needs",
        _default_resources,
    ),
    CheckRule(
        "CHK-015",
        Severity.INFO,
        "no threats declared",
        "check lints a boundary against its threats; with none, most rules cannot apply",
        "declare threats: untrusted_documents, generated_code, trusted_api",
        _no_threats,
    ),
    CheckRule(
        "CHK-016",
        Severity.WARNING,
        "untrusted documents with network egress",
        "text in a document can instruct the agent to send data to an allowed host",
        "drop network access, or keep it to hosts that cannot receive arbitrary data",
        _untrusted_with_egress,
    ),
    CheckRule(
        "CHK-017",
        Severity.ERROR,
        "generated code with no runtime boundary",
        "code a model wrote reaches everything the agent process can: files, credentials, network",
        "set runtime.backend: process (or container, microvm) and name what the code may touch",
        _generated_code_without_runtime,
    ),
    CheckRule(
        "CHK-018",
        Severity.WARNING,
        "host directory mounted writable into a container or microVM",
        "the guest boundary isolates the host kernel, not a directory shared with it: writes land on the host",
        "mount it read-only and export results from scratch, or review what the task writes there",
        _guest_writable_host_dir,
    ),
    CheckRule(
        "CHK-019",
        Severity.ERROR,
        "long-lived secret mounted into a container or microVM",
        "isolation from the host does not make a secret inside the guest safe: guest code can read and send it",
        "use via: broker so the secret stays with the broker's actions",
        _guest_long_lived_secret,
    ),
    CheckRule(
        "CHK-020",
        Severity.ERROR,
        "broker action without a business validator",
        "authorization says who may write; only a business rule says whether the write makes sense "
        "(an invoice amount that moves by 90%), which a prompt-injected model will not question",
        "give the action a validate function, with review above a threshold",
        _broker_action_without_validator,
    ),
    CheckRule(
        "CHK-021",
        Severity.ERROR,
        "record action the broker does not register",
        "every call for it will be refused: the manifest and the broker disagree about what the task does",
        "register the action in broker.yaml, or remove it from records",
        _record_action_not_in_broker,
    ),
    CheckRule(
        "CHK-022",
        Severity.INFO,
        "kubernetes settings",
        "what contain k8s render will produce for this manifest",
        "see docs/k8s.md for each setting",
        _k8s_settings,
    ),
    CheckRule(
        "CHK-023",
        Severity.WARNING,
        "Kubernetes image not set or not pinned by digest",
        "a tag can be moved after review, so the cluster may run code nobody looked at",
        "set kubernetes.image (and proxy_image) to name@sha256:<digest>",
        _k8s_unpinned_images,
    ),
    # Everything contain k8s render refuses, reported before anyone renders (same rows, same reasons).
    *(
        CheckRule(row.id, Severity.ERROR, f"kubernetes: {row.title}", row.why, row.fix, _k8s_refusal(row))
        for row in RENDER_REFUSALS
    ),
    CheckRule(
        "CHK-024",
        Severity.WARNING,
        "fleet retries with a writable host directory",
        "contain fleet reruns a job lost with its node; its broker writes replay (keys come from the job), "
        "but what its first run wrote to a bound host directory is written again",
        "write results to scratch and list them as the job's outputs, or set fleet.retries: 0",
        _fleet_retries_with_write_binds,
    ),
)
