"""The measures, by id, in table order (see bench/README.md)."""

from __future__ import annotations

from types import ModuleType

from bench.measures import (
    p01_call,
    p01_typed,
    p02_http,
    p03_ws,
    p04_flush,
    p05_workflow,
    p06_replay,
    p06_wake,
    p06w_wake,
    p07_broadcast,
    p08_schedule,
    p09_memory,
    p10_scaling,
    p11_engine,
    p12_hot,
    p13_spread,
    p14_queue,
    p15_streams,
    p16_tasks,
    p17_reads,
    p40_big_state,
    p41_request_bystander,
)

MEASURES: dict[str, ModuleType] = {
    module.ID: module
    for module in (
        p01_call,
        p01_typed,
        p02_http,
        p03_ws,
        p04_flush,
        p05_workflow,
        p06_replay,
        p06_wake,
        p06w_wake,
        p07_broadcast,
        p08_schedule,
        p09_memory,
        p10_scaling,
        p11_engine,
        p12_hot,
        p13_spread,
        p14_queue,
        p15_streams,
        p16_tasks,
        p17_reads,
        p40_big_state,
        p41_request_bystander,
    )
}
