"""BlockPool: the physical KV blocks, their reference counts, and the prefix-cache index.

Mechanism only: the pool hands out and takes back block ids. Which sequence gets them is the
BlockManager's business, and whether a sequence may run at all is the Scheduler's.

    free queue (least recently freed first)           cached: hash -> block id
    head ⇄ [ 5 ] ⇄ [ 2 ] ⇄ [ 9 ] ⇄ tail               0x3fa1.. -> 2    (ref 0, still reusable)
             ▲ allocate() pops here    ▲ free() appends here

A freed block keeps its K/V and its hash until allocate() reuses it, so a later request with the
same prefix can take it back out of the *middle* of the queue. That is why the queue is a doubly
linked list over block ids: removing any block is O(1), and eviction is LRU for free.

A hash is only a name: two different blocks can share one (8 bytes cannot tell every prefix apart).
So each cached block also keeps what the name stands for, its parent's hash and its own token ids,
and a lookup is a hit only when those match too.
"""
from __future__ import annotations

BlockKey = tuple  # (parent block hash or None, the block's token ids as a tuple)


class FreeBlockQueue:
    """A doubly linked list of block ids with O(1) append, popleft and remove-from-anywhere."""

    _NIL = -1   # "no neighbour" inside the link arrays only; never leaves this class

    def __init__(self, num_blocks: int):
        self._prev = [self._NIL] * num_blocks
        self._next = [self._NIL] * num_blocks
        self._in_queue = [False] * num_blocks
        self._head = self._tail = self._NIL
        self._len = 0
        for block_id in range(num_blocks):
            self.append(block_id)

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: int) -> bool:
        return self._in_queue[block_id]

    def append(self, block_id: int) -> None:
        assert not self._in_queue[block_id], f"block {block_id} is already free"
        self._prev[block_id], self._next[block_id] = self._tail, self._NIL
        if self._tail == self._NIL:
            self._head = block_id
        else:
            self._next[self._tail] = block_id
        self._tail = block_id
        self._in_queue[block_id] = True
        self._len += 1

    def remove(self, block_id: int) -> None:
        assert self._in_queue[block_id], f"block {block_id} is not free"
        prev, nxt = self._prev[block_id], self._next[block_id]
        if prev == self._NIL:
            self._head = nxt
        else:
            self._next[prev] = nxt
        if nxt == self._NIL:
            self._tail = prev
        else:
            self._prev[nxt] = prev
        self._in_queue[block_id] = False
        self._len -= 1

    def popleft(self) -> int:
        if self._head == self._NIL:
            raise RuntimeError("no free KV blocks")
        block_id = self._head
        self.remove(block_id)
        return block_id

    def order(self) -> list[int]:
        """Block ids from the next to be allocated to the last."""
        out, block_id = [], self._head
        while block_id != self._NIL:
            out.append(block_id)
            block_id = self._next[block_id]
        return out


class BlockPool:
    """All physical blocks: who is free, how many owners each has, and which are prefix-cached."""

    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks <= 0:
            raise ValueError(f"need at least one KV block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_count = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.block_key: list[BlockKey | None] = [None] * num_blocks   # what the hash stands for
        self.cached: dict[int, int] = {}          # block hash -> block id holding those tokens' K/V
        self.free_queue = FreeBlockQueue(num_blocks)
        # Running totals; the engine diffs them per step for the trace.
        self.num_allocated = self.num_freed = self.num_shared = self.num_evicted = 0

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def counters(self) -> tuple[int, int, int, int]:
        """(allocated, freed, shared, evicted) so far: the trace records the difference over a step."""
        return self.num_allocated, self.num_freed, self.num_shared, self.num_evicted

    def allocate(self) -> int:
        """A fresh block with one owner. Reusing a cached block evicts its hash (LRU: head of the queue)."""
        block_id = self.free_queue.popleft()
        if self.block_hash[block_id] is not None:
            del self.cached[self.block_hash[block_id]]
            self.block_hash[block_id] = self.block_key[block_id] = None
            self.num_evicted += 1
        self.ref_count[block_id] = 1
        self.num_allocated += 1
        return block_id

    def share(self, block_id: int) -> None:
        """One more owner: a prefix-cache hit or a fork. A free cached block is pulled out of the queue."""
        if self.ref_count[block_id] == 0:
            self.free_queue.remove(block_id)
        self.ref_count[block_id] += 1
        self.num_shared += 1

    def free(self, block_id: int) -> None:
        """One owner fewer; at zero the block joins the tail of the free queue, K/V and hash kept."""
        assert self.ref_count[block_id] > 0, f"block {block_id} freed more often than owned"
        self.ref_count[block_id] -= 1
        if self.ref_count[block_id] == 0:
            self.free_queue.append(block_id)
            self.num_freed += 1

    def lookup(self, block_hash: int, key: BlockKey) -> int | None:
        """The cached block named `block_hash`, if it really holds `key` (parent hash, token ids)."""
        if not self.enable_caching:
            return None
        block_id = self.cached.get(block_hash)
        if block_id is None or self.block_key[block_id] != key:
            return None              # a miss, or a different block that happens to share the hash
        return block_id

    def register(self, block_id: int, block_hash: int, key: BlockKey) -> None:
        """Remember that `block_id` holds the (now complete) tokens `key` names by `block_hash`.

        If another block already holds the same tokens (two requests prefilled them in the same step,
        or the last prompt block was recomputed), the first one stays the cached copy; if another block
        merely shares the hash, it stays too, and this one is simply not cached.
        """
        if not self.enable_caching or block_hash in self.cached or self.block_hash[block_id] is not None:
            return
        self.cached[block_hash] = block_id
        self.block_hash[block_id], self.block_key[block_id] = block_hash, key

    def num_reusable(self, block_ids: list[int]) -> int:
        """How many of these cached blocks are free right now (taking them shrinks the free queue)."""
        return sum(1 for b in block_ids if self.ref_count[b] == 0)
