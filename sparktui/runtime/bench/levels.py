"""One concurrency level: `users` clients, each sending `requests_per_user` requests back to back (a
closed loop), with the watcher beside them; its figures from what they saw."""

from __future__ import annotations

import asyncio
import threading
import time

from sparktui.errors import UserError
from sparktui.runtime.bench.client import Cancelled, ServerGone, StreamClient
from sparktui.runtime.bench.figures import LevelWatch, summarize
from sparktui.runtime.bench.request_record import RequestRecord
from sparktui.runtime.bench.results import BenchProgress, LevelResult, ProgressFn
from sparktui.runtime.bench.watcher import Watcher


class LevelAborted(Exception):
    """A level ended early (the server went, the run was cancelled): what it measured, and why."""

    def __init__(self, result: LevelResult, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.result, self.cause = result, cause


class LevelRunner:
    def __init__(
        self, client: StreamClient, watcher: Watcher, progress: ProgressFn | None, cancel: threading.Event
    ) -> None:
        self.client, self.watcher, self.progress, self.cancel = client, watcher, progress, cancel
        self.settings = client.settings
        self.levels_run = 0

    async def level(self, users: int) -> LevelResult:
        self.levels_run += 1
        records: list[RequestRecord] = []
        total = users * self.settings.requests_per_user
        sampled = LevelWatch()
        self.client.begin_level()
        done = asyncio.Event()
        await self.client.connect(users)
        cpu0, started = time.process_time(), time.perf_counter()

        async def user() -> None:
            for _ in range(self.settings.requests_per_user):
                if self.cancel.is_set():
                    raise Cancelled()
                record = await self.client.request()
                records.append(record)
                self._say(BenchProgress(users, len(records), total, self.levels_run))

        failure: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                watching = group.create_task(self.watcher.watch(sampled, done))
                users_done = [group.create_task(user()) for _ in range(users)]
                await asyncio.gather(*users_done)
                done.set()  # the watcher finishes the reading it is taking (a short level has only that one)
                self.client.wake.set()
                await watching
        except* (ServerGone, Cancelled, UserError) as caught:
            failure = caught.exceptions[0]
            self.client.halt.set()  # readers still waiting give up; their requests count as unfinished
        result = summarize(
            users,
            records,
            started,
            sampled,
            time.process_time() - cpu0,
            partial=failure is not None or len(records) < total,
        )
        if failure is not None:
            raise LevelAborted(result, failure)
        self._say(BenchProgress(users, len(records), total, self.levels_run, result=result))
        return result

    def _say(self, progress: BenchProgress) -> None:
        if self.progress is not None:
            self.progress(progress)
