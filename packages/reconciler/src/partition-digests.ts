import { hash } from 'node:crypto';

/** A 64-bit hash as its two 32-bit halves (high first), so it lives in a Uint32Array, not as a BigInt. */
export type Hash64 = readonly [hi: number, lo: number];

/**
 * The first 64 bits of `text`'s SHA-1, as two unsigned 32-bit halves. Hex, not a Buffer: a scan
 * hashes every tuple twice, and a Buffer each is a native allocation (and 4× slower).
 */
export function hash64(text: string): Hash64 {
  const hex = hash('sha1', text, 'hex');
  return [Number.parseInt(hex.slice(0, 8), 16), Number.parseInt(hex.slice(8, 16), 16)];
}

/** A hash as the `hi:lo` text {@link PartitionDigests.untaken} names it by. */
export function hash64Text([hi, lo]: Hash64): string {
  return `${hi}:${lo}`;
}

export function hash64ToBigInt([hi, lo]: Hash64): bigint {
  return (BigInt(hi) << 32n) | BigInt(lo);
}

const WORDS = 4; // per slot: the key's hash (hi, lo), the digest (hi, lo)
const EMPTY = 0;
const HELD = 1;
const TAKEN = 2;
const TWO_32 = 2 ** 32;
const SHARD_BITS = 8; // 256 shards, by the key hash's top byte
const SHARD_SLOTS = 8; // a shard's first size; it doubles at 3/4 full

/** One open-addressed table (linear probing, at most 3/4 full) of a share of the partitions. */
interface Shard {
  slots: Uint32Array;
  state: Uint8Array;
  size: number;
}

/**
 * One digest per partition for the full audit's scan, keyed by the partition key's 64-bit hash in
 * open-addressed tables of typed arrays: 23–45 bytes a partition outside V8's heap, where a
 * `Map<string, bigint>` took ~108 on it (docs/agreement.md, "What the full audit holds"). 256
 * shards, each growing on its own: a growth copies 1/256 of the table, not all of it beside its
 * double. Keys are not kept: those never taken are named by a second scan ({@link PartitionDigests.untaken}).
 */
export class PartitionDigests {
  readonly #shards: Shard[] = Array.from({ length: 2 ** SHARD_BITS }, () => ({
    slots: new Uint32Array(SHARD_SLOTS * WORDS),
    state: new Uint8Array(SHARD_SLOTS),
    size: 0,
  }));
  #released = false;

  /** Partitions held. */
  get size(): number {
    return this.#live().reduce((sum, shard) => sum + shard.size, 0);
  }

  /** Adds a tuple's hash to its partition's digest (the sum mod 2^64, as `tupleDigest` makes it). */
  add(keyHash: Hash64, tupleHash: Hash64): void {
    const shard = this.#shardOf(keyHash);
    if ((shard.size + 1) * 4 > shard.state.length * 3) grow(shard);
    const slot = find(shard, keyHash);
    const { slots, state } = shard;
    const at = slot * WORDS;
    if (state[slot] === EMPTY) {
      state[slot] = HELD;
      slots[at] = keyHash[0];
      slots[at + 1] = keyHash[1];
      shard.size += 1;
    }
    const lo = (slots[at + 3] as number) + tupleHash[1];
    slots[at + 3] = lo; // a Uint32Array keeps the low 32 bits
    slots[at + 2] = (slots[at + 2] as number) + tupleHash[0] + (lo >= TWO_32 ? 1 : 0);
  }

  /** The digest of the partition (0 if it holds none), marking it taken; taken again, it reads 0. */
  take(keyHash: Hash64): bigint {
    const shard = this.#shardOf(keyHash);
    const slot = find(shard, keyHash);
    if (shard.state[slot] !== HELD) return 0n;
    shard.state[slot] = TAKEN;
    const at = slot * WORDS;
    return hash64ToBigInt([shard.slots[at + 2] as number, shard.slots[at + 3] as number]);
  }

  /** The hashes of the partitions never taken, as {@link hash64Text}: what a second scan names. */
  untaken(): Set<string> {
    const left = new Set<string>();
    for (const { slots, state } of this.#live()) {
      for (let slot = 0; slot < state.length; slot += 1) {
        if (state[slot] === HELD)
          left.add(hash64Text([slots[slot * WORDS] as number, slots[slot * WORDS + 1] as number]));
      }
    }
    return left;
  }

  /** Frees the table's memory now (the scan is done with it); it holds nothing after. */
  release(): void {
    this.#released = true;
    for (const { slots, state } of this.#shards) {
      release(slots.buffer);
      release(state.buffer);
    }
  }

  #shardOf([hi]: Hash64): Shard {
    return this.#live()[hi >>> (32 - SHARD_BITS)] as Shard;
  }

  #live(): readonly Shard[] {
    if (this.#released) throw new Error('PartitionDigests: used after release()');
    return this.#shards;
  }
}

/** The slot of `shard` holding `keyHash`, or the empty one where it goes. */
function find(shard: Shard, [hi, lo]: Hash64): number {
  const { slots, state } = shard;
  const mask = state.length - 1;
  for (let slot = lo & mask; ; slot = (slot + 1) & mask) {
    if (state[slot] === EMPTY) return slot;
    if (slots[slot * WORDS] === hi && slots[slot * WORDS + 1] === lo) return slot;
  }
}

function grow(shard: Shard): void {
  const { slots, state } = shard;
  shard.slots = new Uint32Array(slots.length * 2);
  shard.state = new Uint8Array(state.length * 2);
  for (let slot = 0; slot < state.length; slot += 1) {
    if (state[slot] === EMPTY) continue;
    const at = slot * WORDS;
    const to = find(shard, [slots[at] as number, slots[at + 1] as number]);
    shard.state[to] = state[slot] as number;
    shard.slots.set(slots.subarray(at, at + WORDS), to * WORDS);
  }
  release(slots.buffer);
  release(state.buffer);
}

/** Detaches `buffer`: its memory is freed now, not at the next full GC (ES2024's `transfer`, Node ≥ 21; the lib here is ES2023). */
function release(buffer: ArrayBufferLike): void {
  (buffer as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
}
