"""BlockManager: each sequence's block table, prefix caching, copy-on-write, and the swap space.

A sequence's tokens live in fixed-size blocks scattered over the KV cache; its BlockTable lists
them in order, like a page table:

    block_size = 4          logical block:   0             1             2
    tokens  "The cat sat on the mat ."       [The cat sat on][the mat . _]
    block table  [7, 2]                       physical 7     physical 2 (one slot still free)
    slot of token t = table[t // 4] * 4 + t % 4       ("mat" -> 2 * 4 + 1 = 9)

Prefix caching: every *full* block gets a hash of (the previous block's hash, its token ids), so
equal hashes mean equal prefixes, not just equal blocks. A new sequence looks its prompt up block
by block and shares every hit instead of recomputing it. The hash only finds the candidate: a hit
counts when the cached block's parent hash and token ids equal the ones looked for (BlockPool).

Copy-on-write: n samples of one prompt start out sharing all its blocks (ref count n). The first
time a sample writes into a block someone else still holds, it gets its own copy of that block.
"""
from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from .block_pool import BlockPool


def hash_block(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Chained hash of one full block: it depends on every token before it, not only its own."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"root" if parent_hash is None else parent_hash.to_bytes(8, "little"))
    h.update(",".join(map(str, token_ids)).encode())
    return int.from_bytes(h.digest(), "little")


@dataclass(slots=True)
class BlockTable:
    """One sequence's blocks in logical order, and the hashes of its leading full blocks."""
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class PrefixHit:
    """Cached full blocks that cover the start of a prompt (found, not yet claimed)."""
    block_ids: list[int]
    block_hashes: list[int]
    block_size: int

    @property
    def num_tokens(self) -> int:
        return len(self.block_ids) * self.block_size


@dataclass(slots=True)
class BlockInfo:
    block_id: int
    ref_count: int
    block_hash: int | None
    owners: list[Hashable]
    free_rank: int | None          # position in the free queue (0 = allocated next), None if in use


@dataclass(slots=True)
class AllocatorState:
    """Everything the page-allocator widget draws."""
    num_blocks: int
    block_size: int
    blocks: list[BlockInfo]
    free_order: list[int]
    tables: dict[Hashable, list[int]]
    swapped: dict[Hashable, list[int]]
    num_free: int
    num_cached: int


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 num_swap_blocks: int = 0):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, enable_prefix_caching)
        self.tables: dict[Hashable, BlockTable] = {}
        self.swap_free: deque[int] = deque(range(num_swap_blocks))
        self.swapped: dict[Hashable, BlockTable] = {}   # owner -> table whose ids are CPU swap blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_ids(self, owner: Hashable) -> list[int]:
        return self.tables[owner].block_ids

    # -- prefix caching ------------------------------------------------------------------------
    def find_cached_prefix(self, token_ids: Sequence[int]) -> PrefixHit:
        """The longest run of cached full blocks at the start of `token_ids`.

        Only blocks that end before the last token count: that token is always recomputed, because
        its logits are what the next token is sampled from.
        """
        hit = PrefixHit([], [], self.block_size)
        if not self.pool.enable_caching:
            return hit
        parent = None
        for i in range((len(token_ids) - 1) // self.block_size):
            block_tokens = tuple(token_ids[i * self.block_size:(i + 1) * self.block_size])
            h = hash_block(parent, block_tokens)
            block_id = self.pool.lookup(h, (parent, block_tokens))
            if block_id is None:
                break
            hit.block_ids.append(block_id)
            hit.block_hashes.append(h)
            parent = h
        return hit

    def cache_full_blocks(self, owner: Hashable, token_ids: Sequence[int], num_computed: int) -> None:
        """Hash and register every block of `owner` whose tokens all have K/V in the cache now."""
        if not self.pool.enable_caching:
            return
        table = self.tables[owner]
        full = min(num_computed // self.block_size, len(table.block_ids))
        for i in range(len(table.block_hashes), full):
            parent = table.block_hashes[-1] if table.block_hashes else None
            block_tokens = tuple(token_ids[i * self.block_size:(i + 1) * self.block_size])
            h = hash_block(parent, block_tokens)
            table.block_hashes.append(h)
            self.pool.register(table.block_ids[i], h, (parent, block_tokens))

    # -- allocation ----------------------------------------------------------------------------
    def allocate_slots(self, owner: Hashable, num_computed: int, num_new: int, prefix: PrefixHit | None = None,
                       num_lookahead_tokens: int = 0) -> list[tuple[int, int]] | None:
        """Make room for tokens [num_computed, num_computed + num_new + num_lookahead_tokens) of `owner`.

        `prefix` (first admission only) is claimed first, so num_computed = prefix.num_tokens then.
        Lookahead tokens are slots for speculative draft tokens, written in the same step and kept
        only if they are accepted (trim() gives back the blocks of the rest). Returns the (source, destination) block copies that copy-on-write
        needs before the step runs, or None if there are not enough free blocks (nothing changes then).
        """
        table = self.tables.get(owner) or BlockTable()
        hit_ids = prefix.block_ids if prefix else []
        have = len(table.block_ids) + len(hit_ids)
        end = num_computed + num_new + num_lookahead_tokens
        fresh = max(0, self.blocks_for(end) - have)
        first, last = num_computed // self.block_size, self.blocks_for(end)
        shared = [i for i in range(first, min(last, len(table.block_ids)))
                  if self.pool.ref_count[table.block_ids[i]] > 1] if end > num_computed else []
        if fresh + len(shared) + self.pool.num_reusable(hit_ids) > self.pool.num_free:
            return None
        self.tables[owner] = table
        for block_id, h in zip(hit_ids, prefix.block_hashes if prefix else []):
            self.pool.share(block_id)
            table.block_ids.append(block_id)
            table.block_hashes.append(h)
        copies = []
        for i in shared:                      # copy-on-write: we are about to write into block i
            old, new = table.block_ids[i], self.pool.allocate()
            copies.append((old, new))
            self.pool.free(old)
            table.block_ids[i] = new
            del table.block_hashes[i:]        # a block that will change is no longer the cached one
        table.block_ids.extend(self.pool.allocate() for _ in range(fresh))
        return copies

    def trim(self, owner: Hashable, num_tokens: int) -> None:
        """Keep only the blocks that `num_tokens` tokens need; the rest (lookahead blocks whose drafts
        were all rejected) go back to the pool, newest first. A freed block was never hashed: only
        blocks full of verified tokens are, and those lie before num_tokens."""
        table = self.tables[owner]
        keep = self.blocks_for(num_tokens)
        while len(table.block_ids) > keep:
            assert len(table.block_hashes) < len(table.block_ids), "a cached block was about to be trimmed"
            self.pool.free(table.block_ids.pop())

    def fork(self, parent: Hashable, child: Hashable) -> None:
        """The child shares every block of the parent (ref counts + 1); writes will copy on demand."""
        src = self.tables[parent]
        for block_id in src.block_ids:
            self.pool.share(block_id)
        self.tables[child] = BlockTable(list(src.block_ids), list(src.block_hashes))

    def free(self, owner: Hashable) -> None:
        """Drop every block of `owner` (GPU or swap). Tail blocks are freed first so that they are
        evicted first: the start of a prompt is the part most likely to be shared again."""
        table = self.tables.pop(owner, None)
        if table is not None:
            for block_id in reversed(table.block_ids):
                self.pool.free(block_id)
        swapped = self.swapped.pop(owner, None)
        if swapped is not None:
            self.swap_free.extend(swapped.block_ids)

    # -- swap space ----------------------------------------------------------------------------
    def swap_out(self, owner: Hashable) -> list[tuple[int, int]] | None:
        """Move `owner` to CPU swap blocks: returns (gpu block, cpu block) copies, None if no room."""
        table = self.tables[owner]
        if len(table.block_ids) > len(self.swap_free):
            return None
        cpu_ids = [self.swap_free.popleft() for _ in table.block_ids]
        pairs = list(zip(table.block_ids, cpu_ids))
        self.free(owner)
        self.swapped[owner] = BlockTable(cpu_ids)
        return pairs

    def can_swap_in(self, owner: Hashable, num_tokens_after: int) -> bool:
        cpu = self.swapped[owner]
        return max(len(cpu.block_ids), self.blocks_for(num_tokens_after)) <= self.pool.num_free

    def swap_in(self, owner: Hashable) -> list[tuple[int, int]]:
        """Bring `owner` back into fresh GPU blocks: returns (cpu block, gpu block) copies.

        Its hashes start over: the next cache_full_blocks hashes and registers the blocks again (the
        same tokens, the same K/V: cacheable again)."""
        cpu = self.swapped.pop(owner)
        gpu_ids = [self.pool.allocate() for _ in cpu.block_ids]
        self.swap_free.extend(cpu.block_ids)
        self.tables[owner] = BlockTable(gpu_ids)
        return list(zip(cpu.block_ids, gpu_ids))

    # -- introspection -------------------------------------------------------------------------
    def state(self) -> AllocatorState:
        owners: dict[int, list[Hashable]] = {}
        for owner, table in self.tables.items():
            for block_id in table.block_ids:
                owners.setdefault(block_id, []).append(owner)
        order = self.pool.free_queue.order()
        rank = {b: i for i, b in enumerate(order)}
        blocks = [BlockInfo(b, self.pool.ref_count[b], self.pool.block_hash[b], owners.get(b, []), rank.get(b))
                  for b in range(self.pool.num_blocks)]
        return AllocatorState(
            num_blocks=self.pool.num_blocks, block_size=self.block_size, blocks=blocks, free_order=order,
            tables={o: list(t.block_ids) for o, t in self.tables.items()},
            swapped={o: list(t.block_ids) for o, t in self.swapped.items()},
            num_free=self.pool.num_free, num_cached=len(self.pool.cached))
