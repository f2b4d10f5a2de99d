"""The actors: every domain's `TASKS` (its tasks.py), each a named outbox job.

Messages carry an outbox job id only (app/kit/outbox.py); the arguments live in the row.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from app.domains import DOMAINS
from app.jobs import Task
from app.kit.domains import collect
from workers.runtime import JobRuntime, run_job


def collect_tasks(domains: tuple[str, ...] = DOMAINS) -> dict[str, Task]:
    """Every task of every domain package that has a `tasks` module, by actor name."""
    tasks: dict[str, Task] = {}
    for declared in collect("tasks", "TASKS", domains):
        for task in declared:
            if task.actor in tasks:
                raise RuntimeError(f"two domains declare the job {task.actor!r}")
            tasks[task.actor] = task
    return tasks


def declare_actors(
    broker: dramatiq.Broker, runtime: JobRuntime, tasks: dict[str, Task]
) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare every task on `broker`: each actor takes one outbox job id.

    A detached task's actor only starts the job on the runtime's loop and returns (waiting
    while the process runs as many detached jobs as it may); the others run on the worker
    thread that took the message, which waits for them.
    """
    actors: dict[str, dramatiq.Actor[Any, Any]] = {}
    for name, task in tasks.items():
        function: Any
        if task.detached:

            def start(job_id: str, task: Task = task) -> None:  # one per actor
                runtime.taken(job_id)
                runtime.start_detached(job_id, task.body)

            function = start
        else:

            async def run(job_id: str, task: Task = task) -> None:  # one per actor
                runtime.taken(job_id)
                await run_job(runtime, job_id, task.body)

            function = run
        function.__name__ = name.replace(".", "_")
        actors[name] = dramatiq.Actor(
            function,
            broker=broker,
            actor_name=name,
            queue_name=task.queue,
            priority=task.priority,
            options={"max_retries": 0},
        )
    return actors
