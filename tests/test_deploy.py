"""The deployment files validate: compose against the Compose spec, manifests against Kubernetes."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {
    name: "x" * 16
    for name in (
        "POSTGRES_PASSWORD",
        "GITEA_ADMIN_PASSWORD",
        "MATTERMOST_ADMIN_PASSWORD",
        "SWARM_JOIN_TOKEN",
        "SWARM_OPERATOR_TOKEN",
    )
} | {"SWARM_TASK_DIR": "./examples/tasks/demo"}
VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """What `docker compose config` does with ${VAR}, ${VAR:-default}, ${VAR:?error} and $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.groups()
        if op and op.endswith("?") and not env.get(name):
            raise KeyError(f"{name}: {arg}")
        return env.get(name) or arg or ""

    out = VARIABLE.sub(one, value)
    return int(out) if out != value and out.isdigit() else out


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_file_validates_against_the_compose_spec() -> None:
    compose_spec = pytest.importorskip("compose_spec")
    resolved = interpolate(compose(), SECRETS)
    parsed = compose_spec.PyCompose.from_json(json.dumps(resolved))
    parsed.validate()
    assert set(parsed.service_names()) >= {
        "postgres", "gitea", "mattermost", "bootstrap", "hub", "worker", "evaluator"
    }  # fmt: skip


def test_required_secrets_refuse_to_start_unset() -> None:
    for name in SECRETS:
        with pytest.raises(KeyError, match=name):
            interpolate(compose(), {k: v for k, v in SECRETS.items() if k != name})


def test_every_variable_is_documented_in_env_example() -> None:
    documented = set(re.findall(r"^(\w+)=", (ROOT / ".env.example").read_text(), re.M))
    used = {m.group(1) for m in VARIABLE.finditer((ROOT / "docker-compose.yml").read_text())}
    assert used - {None} <= documented


def test_services_wait_for_what_they_need() -> None:
    services = compose()["services"]
    for name in ("postgres", "gitea", "mattermost", "hub"):
        assert "healthcheck" in services[name], name
    assert (
        services["hub"]["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"
    )
    assert services["worker"]["depends_on"]["hub"]["condition"] == "service_healthy"
    assert services["worker"]["deploy"]["replicas"] == "${SWARM_WORKERS:-4}"
    env = services["mattermost"]["environment"]
    assert env["MM_RATELIMITSETTINGS_ENABLE"] == "false"
    assert int(env["MM_TEAMSETTINGS_MAXUSERSPERTEAM"]) >= 1024
    assert "GITEA__api__MAX_RESPONSE_ITEMS" in services["gitea"]["environment"]
    # hidden tests reach the evaluator only
    assert not any("/task" in str(v) for v in services["worker"].get("volumes", []))


def test_dockerfile_installs_only_what_the_package_declares() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(extras["optional-dependencies"])
    installs = re.findall(r"pip install[^\n]*", (ROOT / "infra" / "Dockerfile").read_text())
    assert installs, "the image installs the package"
    for line in installs:
        targets = [t for t in line.split()[2:] if not t.startswith("-")]
        assert len(targets) == 1 and re.fullmatch(r'"?\.\[([\w,]+)\]"?', targets[0]), line
        wanted = set(re.findall(r"\w+", targets[0].split("[")[1]))
        assert wanted <= declared, f"{wanted - declared} not in pyproject's extras"


MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifests_validate(path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for resource in yaml.safe_load_all(path.read_text()):
        if resource["kind"] == "Kustomization":
            assert all((path.parent / r).exists() for r in resource["resources"])
            continue
        kv.validate(resource, kv.latest_version(), strict=True)


def test_workers_are_a_statefulset_whose_ordinal_is_the_worker_id() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/workers.yaml").read_text()))
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    field = env["SWARM_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert "apps.kubernetes.io/pod-index" in field
