"""Dynamic batching for the server: concurrent requests become one packed forward pass.

Requests wait in a bounded queue; one worker collects up to ``max_batch`` of them (waiting at
most ``max_wait_s`` after the first, and keeping ``batch size × longest request`` within
``max_batch_tokens``), runs :meth:`Engine.run` on a single model thread (off the event loop), and
resolves each request's future. A full queue is refused at once (the server answers 429); a
request whose future was cancelled (its client timed out or disconnected) is dropped before its forward
pass, without taking a place in a batch, and counted in :attr:`Batcher.dropped`; a pass whose every request has
been cancelled while it runs is abandoned at the next decoder layer (:func:`kevlike.model.abort.abortable`) and
counted in :attr:`Batcher.aborted`, so the requests queued behind it do not wait for answers nobody reads.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kevlike.model.abort import PassAborted, abortable, decoder_layers, engine_modules


class QueueFullError(RuntimeError):
    """The bounded queue is full; retry later."""


@dataclass
class _Item:
    prepared: object        # kevlike.model.engine.Prepared
    future: asyncio.Future

    @property
    def n_tokens(self) -> int:
        return self.prepared.n_tokens


class Batcher:
    """Args:
        engine: a :class:`kevlike.Engine`.
        max_batch: requests per forward pass (≥ 1).
        max_wait_s: how long the first request of a batch waits for company (seconds).
        queue_size: requests that may wait (not counting the batch being computed).
        max_batch_tokens: bound on ``batch size × longest request`` (padded tokens) per pass.
        executor: the single-thread executor the forward passes run on (default: a new one); batchers of
            engines that share a model pass the same one, so that model runs one pass at a time.

    Raises:
        ValueError: a bound below 1 (or a negative wait).
    """

    def __init__(self, engine, max_batch: int = 8, max_wait_s: float = 0.005, queue_size: int = 64,
                 max_batch_tokens: int = 32768, executor: ThreadPoolExecutor | None = None):
        if max_batch < 1 or queue_size < 1 or max_batch_tokens < 1 or max_wait_s < 0:
            raise ValueError("max_batch, queue_size and max_batch_tokens must be >= 1 and max_wait_s >= 0")
        self.engine = engine
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_batch_tokens = max_batch_tokens
        self.queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=queue_size)
        self.owns_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="kevlike-model")
        self._carry: _Item | None = None
        self._task: asyncio.Task | None = None
        self._busy = False
        self.batches = 0      # forward passes run
        self.batched = 0      # requests answered
        self.dropped = 0      # requests dropped before their forward pass (future cancelled: client gone or timed out)
        self.aborted = 0      # forward passes abandoned because every request of the batch was cancelled meanwhile
        self._layers = decoder_layers(engine_modules(engine))   # where a pass nobody waits for stops (:meth:`_run`)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def submit(self, prepared) -> asyncio.Future:
        """Queue a prepared request; returns the future of its response dict.

        Raises:
            QueueFullError: the queue already holds ``queue_size`` requests.
        """
        fut = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Item(prepared, fut))
        except asyncio.QueueFull:
            raise QueueFullError(f"queue full ({self.queue.maxsize} requests waiting)") from None
        return fut

    @property
    def waiting(self) -> int:
        return self.queue.qsize() + (self._carry is not None)

    def _live(self, item: _Item) -> bool:
        """Whether ``item`` is still wanted; a cancelled one is counted as dropped."""
        if item.future.done():
            self.dropped += 1
            return False
        return True

    async def _next(self) -> _Item:
        if self._carry is not None:
            item, self._carry = self._carry, None
            if self._live(item):
                return item
        while True:
            item = await self.queue.get()
            if self._live(item):
                return item

    async def _collect(self) -> list[_Item]:
        loop = asyncio.get_running_loop()
        batch = [await self._next()]
        longest = batch[0].n_tokens
        deadline = loop.time() + self.max_wait_s
        while len(batch) < self.max_batch:
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(0.001, remaining))
                continue
            if not self._live(item):
                continue
            longest_if = max(longest, item.n_tokens)
            if longest_if * (len(batch) + 1) > self.max_batch_tokens:
                self._carry = item  # first in the next batch
                break
            batch.append(item)
            longest = longest_if
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [i for i in await self._collect() if self._live(i)]   # cancelled while the batch filled
            if not batch:
                continue
            self._busy = True
            try:
                results = await loop.run_in_executor(self.executor, self._run, batch)
            except PassAborted:
                self.aborted += 1
                self.dropped += len(batch)
                continue
            except Exception as e:  # an engine failure fails this batch only; the loop keeps serving
                for i in batch:
                    if not i.future.done():
                        i.future.set_exception(e)
                continue
            finally:
                self._busy = False
            self.batches += 1
            self.batched += len(batch)
            for i, r in zip(batch, results):
                if not i.future.done():
                    i.future.set_result(r)

    def _run(self, batch: list[_Item]) -> list[dict]:
        """``engine.run`` on the model thread, abandoned (:class:`PassAborted`) once no future of ``batch`` waits.
        ``Future.done()`` is read from this thread: a flag read, and a stale answer only delays the abort by a
        layer."""
        with abortable(self._layers, lambda: all(i.future.done() for i in batch)):
            return self.engine.run([i.prepared for i in batch])

    async def stop(self) -> None:
        """Finish what is queued, then stop the worker and the model thread."""
        while self.waiting or self._busy:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self.owns_executor:
            self.executor.shutdown(wait=True)
