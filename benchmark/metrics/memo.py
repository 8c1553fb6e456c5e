"""Bounded memos: an LRU cache, and a lock-guarded one the loader threads share (memory must not grow with the
query set)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class LRUCache(OrderedDict):
    """Bounded memo, least recently used out first (memory must not grow with the query set)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def get_touch(self, key: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.capacity:
            self.popitem(last=False)


class Memo:
    """A small LRU of values made once per key and shared by the loader threads: `get(key, make)` returns the kept
    value or makes it under a lock, so a source two threads ask for together is decoded once. The lock does not
    pickle: a DataLoader worker process gets its own memo (empty, as it starts). Values are shared by every item
    that asks for them, so they must never be modified in place."""

    def __init__(self, capacity: int) -> None:
        self._values = LRUCache(capacity)
        self.made = 0  # values made (the rest were hits): what the tests count
        self.__setstate__(self.__dict__)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import threading

        self.__dict__.update(state)
        self._lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._values.get_touch(key)
            if hit is None:
                hit = make()
                self.made += 1
                self._values.put(key, hit)
        return hit
