"""The official ``openai`` Node SDK streams a tool call through the gateway (skipped without Node/npm)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from bench.fake_cloud import FakeCloudConfig, run_fake_cloud_in_thread
from harness import make_settings, run_gateway

SCRIPT = r"""
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: process.argv[2], apiKey: "kiosk-key-not-used", maxRetries: 0 });
const tools = [{ type: "function", function: { name: "show_map", description: "Show the way",
  parameters: { type: "object", properties: { gate: { type: "string" } }, required: ["gate"] } } }];
(async () => {
  const fragments = [];
  const stream = client.chat.completions.stream({
    model: "edgecloud-auto", tools, messages: [{ role: "user", content: "Show me gate B12" }] });
  stream.on("chunk", (chunk) => {
    for (const c of chunk.choices) for (const t of c.delta.tool_calls || []) fragments.push(t.function.arguments || "");
  });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  console.log(JSON.stringify({ finish: choice.finish_reason, calls: choice.message.tool_calls, fragments }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


@pytest.fixture(scope="module")
def node_openai(tmp_path_factory):
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("Node.js or npm is not installed")
    folder = tmp_path_factory.mktemp("node-openai")
    (folder / "package.json").write_text('{"name": "edgecloud-node-test", "private": true}')
    try:
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", "openai@^5"], cwd=folder,
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.skip("npm could not fetch the openai package in time")
    if done.returncode != 0:
        pytest.skip(f"npm could not fetch the openai package: {done.stderr.strip()[-300:]}")
    (folder / "stream_tool.js").write_text(SCRIPT)
    return node, folder


def test_node_sdk_streams_a_tool_call(node_openai, tmp_path, embedded_model):
    node, folder = node_openai
    fake = run_fake_cloud_in_thread(FakeCloudConfig())
    try:
        provider = {"name": "fake", "base_url": fake.base_url, "model": "fake-gpt"}
        settings = make_settings(tmp_path, cache={"enabled": False}, cloud={"providers": [provider]})
        with run_gateway(settings) as gw:
            done = subprocess.run([node, "stream_tool.js", gw.base_url + "/v1"], cwd=folder, capture_output=True,
                                  text=True, timeout=120)
    finally:
        fake.stop()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["finish"] == "tool_calls"
    [call] = out["calls"]
    assert call["function"]["name"] == "show_map" and json.loads(call["function"]["arguments"]) == {"gate": "B12"}
    assert len([f for f in out["fragments"] if f]) > 1, "the arguments arrived in fragments"
