"""Settings precedence: flags > EDGECLOUD_* environment > TOML file > defaults; secrets masked."""

from __future__ import annotations

import json
import subprocess
import sys

from edge.config import load_settings


def test_precedence_and_cloud_shortcut(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[server]\nport = 9000\nhost = "127.0.0.1"\nadmin_token = "file-token"\n'
        '[edge]\nn_ctx = 1024\nmax_queue = 3\n'
        '[aliases]\n"gpt-4o-mini" = "edgecloud-auto"\n'
        '[[cloud.providers]]\nname = "backup"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m2"\n'
    )
    env = {
        "EDGECLOUD_EDGE_N_CTX": "4096",
        "EDGECLOUD_EDGE_MAX_QUEUE": "5",
        "EDGECLOUD_CLOUD_BASE_URL": "http://127.0.0.1:8/v1",
        "EDGECLOUD_CLOUD_API_KEY": "sk-env-secret",
        "EDGECLOUD_CLOUD_MODEL": "deepseek-chat",
        "EDGECLOUD_ROUTER_HEDGE": "false",
    }
    s = load_settings(toml, {"edge.max_queue": 7, "server.port": None}, environ=env)
    assert s.server.port == 9000  # file (no flag given)
    assert s.edge.n_ctx == 4096  # env beats file
    assert s.edge.max_queue == 7  # flag beats env
    assert s.router.hedge is False
    assert [p.name for p in s.cloud.providers] == ["default", "backup"]  # env provider first
    assert s.cloud.providers[0].resolved_api_key() == "sk-env-secret"
    assert s.resolve_model_name("gpt-4o-mini") == "edgecloud-auto"
    assert s.resolve_model_name("gpt-5") is None
    masked = json.dumps(s.masked())
    assert "sk-env-secret" not in masked and "file-token" not in masked


def test_defaults_are_safe():
    s = load_settings(environ={})
    assert s.server.host == "127.0.0.1"
    assert s.server.admin_token is None and s.server.cors_origins == []
    assert s.logging.log_prompts is False


def test_print_config_masks_secrets(tmp_path):
    env = {"EDGECLOUD_CLOUD_BASE_URL": "http://127.0.0.1:8/v1", "EDGECLOUD_CLOUD_API_KEY": "sk-hide-me",
           "EDGECLOUD_SERVER_ADMIN_TOKEN": "admin-hide-me", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "edge.cli", "serve", "--print-config", "--port", "9999"],
                         capture_output=True, text=True, env=env, check=True, timeout=60).stdout
    data = json.loads(out)
    assert data["server"]["port"] == 9999 and data["server"]["host"] == "127.0.0.1"
    assert "sk-hide-me" not in out and "admin-hide-me" not in out
    assert data["cloud"]["providers"][0]["api_key"] == "**********"
