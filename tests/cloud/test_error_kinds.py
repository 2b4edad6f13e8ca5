"""One list of cloud error kinds: the bridge raises them, the gateway maps each to a status, the SLA counts them."""

from __future__ import annotations

import json

import pytest

from cloud_bridge.errors import BREAKER_KINDS, PROVIDER_FAULT_KINDS, RETRYABLE_KINDS, CloudError, CloudErrorKind
from cloud_bridge.percentile import nearest_rank
from edge.cloud_backend import _STATUS, cloud_error_to_api


def test_every_kind_has_a_status_and_the_sets_hold_only_kinds() -> None:
    assert set(_STATUS) == set(CloudErrorKind)
    for group in (RETRYABLE_KINDS, BREAKER_KINDS, PROVIDER_FAULT_KINDS):
        assert group <= set(CloudErrorKind)


def test_a_kind_reads_as_its_text_everywhere() -> None:
    err = CloudError("timeout_ttft", "slow")
    assert err.kind is CloudErrorKind.TIMEOUT_TTFT and err.kind == "timeout_ttft"
    assert str(err.kind) == f"{err.kind}" == "timeout_ttft"  # logs and metric labels
    assert json.dumps({"kind": err.kind}) == '{"kind": "timeout_ttft"}'
    assert "timeout_ttft" in PROVIDER_FAULT_KINDS and err.kind in PROVIDER_FAULT_KINDS
    assert cloud_error_to_api(err).status == 504
    assert CloudError(CloudErrorKind.RATE_LIMITED, "x").retryable


def test_an_unknown_kind_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError):
        CloudError("timeout_lunch", "not a kind")


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 0.5) == 50.0 and nearest_rank(values, 0.99) == 99.0
    assert nearest_rank(values, 1.0) == 100.0 and nearest_rank([3.0], 0.01) == 3.0
    assert nearest_rank([], 0.99) is None
