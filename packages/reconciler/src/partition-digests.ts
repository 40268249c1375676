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

/**
 * One digest per partition for the full audit's scan, keyed by the partition key's 64-bit hash in
 * an open-addressed table of typed arrays: 23–45 bytes a partition outside V8's heap, where a
 * `Map<string, bigint>` took ~108 on it (docs/agreement.md, "What the full audit holds"). Keys are
 * not kept: those never taken are named by a second scan ({@link PartitionDigests.untaken}).
 */
export class PartitionDigests {
  #slots = new Uint32Array(1024 * WORDS);
  #state = new Uint8Array(1024);
  #size = 0;

  /** Partitions held. */
  get size(): number {
    return this.#size;
  }

  /** Adds a tuple's hash to its partition's digest (the sum mod 2^64, as `tupleDigest` makes it). */
  add(keyHash: Hash64, tupleHash: Hash64): void {
    if ((this.#size + 1) * 4 > this.#state.length * 3) this.#grow();
    const slot = this.#find(keyHash);
    const at = slot * WORDS;
    if (this.#state[slot] === EMPTY) {
      this.#state[slot] = HELD;
      this.#slots[at] = keyHash[0];
      this.#slots[at + 1] = keyHash[1];
      this.#size += 1;
    }
    const lo = (this.#slots[at + 3] as number) + tupleHash[1];
    this.#slots[at + 3] = lo; // a Uint32Array keeps the low 32 bits
    this.#slots[at + 2] = (this.#slots[at + 2] as number) + tupleHash[0] + (lo >= TWO_32 ? 1 : 0);
  }

  /** The digest of the partition (0 if it holds none), marking it taken; taken again, it reads 0. */
  take(keyHash: Hash64): bigint {
    const slot = this.#find(keyHash);
    if (this.#state[slot] !== HELD) return 0n;
    this.#state[slot] = TAKEN;
    const at = slot * WORDS;
    return hash64ToBigInt([this.#slots[at + 2] as number, this.#slots[at + 3] as number]);
  }

  /** The hashes of the partitions never taken, as {@link hash64Text}: what a second scan names. */
  untaken(): Set<string> {
    const left = new Set<string>();
    for (let slot = 0; slot < this.#state.length; slot += 1) {
      if (this.#state[slot] === HELD)
        left.add(hash64Text([this.#slots[slot * WORDS] as number, this.#slots[slot * WORDS + 1] as number]));
    }
    return left;
  }

  /** The slot holding `keyHash`, or the empty one where it goes (linear probing; the table is at most 3/4 full). */
  #find([hi, lo]: Hash64): number {
    const mask = this.#state.length - 1;
    for (let slot = lo & mask; ; slot = (slot + 1) & mask) {
      if (this.#state[slot] === EMPTY) return slot;
      if (this.#slots[slot * WORDS] === hi && this.#slots[slot * WORDS + 1] === lo) return slot;
    }
  }

  #grow(): void {
    const slots = this.#slots;
    const state = this.#state;
    this.#slots = new Uint32Array(slots.length * 2);
    this.#state = new Uint8Array(state.length * 2);
    for (let slot = 0; slot < state.length; slot += 1) {
      if (state[slot] === EMPTY) continue;
      const at = slot * WORDS;
      const to = this.#find([slots[at] as number, slots[at + 1] as number]);
      this.#state[to] = state[slot] as number;
      this.#slots.set(slots.subarray(at, at + WORDS), to * WORDS);
    }
  }
}
