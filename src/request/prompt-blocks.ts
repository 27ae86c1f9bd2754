/**
 * The canonical prompt's block hashes in one pass over the parsed body, without building the
 * prompt. Gives exactly what `chainedBlockHashes(canonicalPrompt(body, maxChars), ...)` gives (the
 * reference, kept in prompt.ts and hashing.ts as the tests' oracle), but:
 *  - no part string (`role + SEP + content`) and no joined prompt are built: each block is
 *    assembled from slices of the body's own strings (V8 slices share their parent's characters),
 *    so a 400 KB body no longer copies its first 128 K characters twice before hashing them;
 *  - it stops walking the body as soon as the last block it hashes is full.
 * A block is still made a string of its 256 characters before encoding, so a surrogate pair
 * split between two parts, or a lone surrogate, encodes exactly as it does in the joined text.
 */
import { xxh } from '../util/xxhash.js';
import { hashText } from './hashing.js';

/** Must match prompt.ts's separator (the reference). */
const SEP = '\u001e';

const encoder = new TextEncoder();

export interface PromptBlocks {
  /** Chained hashes of the leading whole blocks (at most maxBlocks). */
  chain: bigint[];
  /** Hash of the whole text when it is shorter than one block; undefined otherwise. */
  short: bigint | undefined;
}

/** Accumulates the canonical text's characters into blocks and hashes each as it fills. */
class BlockHasher {
  readonly chain: bigint[] = [];
  /** Characters fed so far (the canonical text's length up to where feeding stopped). */
  total = 0;
  private pending = '';
  private prev: bigint;
  private readonly scratch: Uint8Array;
  private readonly raw = xxh().h64Raw;

  constructor(
    private readonly blockChars: number,
    private readonly maxBlocks: number,
    seed: bigint,
  ) {
    this.prev = seed;
    // A UTF-16 unit is at most 3 UTF-8 bytes.
    this.scratch = new Uint8Array(blockChars * 3);
  }

  get done(): boolean {
    return this.chain.length >= this.maxBlocks;
  }

  /** The text of a prompt shorter than one block (only meaningful when no block filled). */
  get rest(): string {
    return this.pending;
  }

  feed(s: string): void {
    let pos = 0;
    while (pos < s.length && !this.done) {
      const need = this.blockChars - this.pending.length;
      const left = s.length - pos;
      if (left < need) {
        this.pending += pos === 0 ? s : s.slice(pos);
        this.total += left;
        return;
      }
      const block = this.pending + s.slice(pos, pos + need);
      pos += need;
      this.total += need;
      this.pending = '';
      const { written } = encoder.encodeInto(block, this.scratch);
      this.prev = this.raw(this.scratch.subarray(0, written), this.prev);
      this.chain.push(this.prev);
    }
  }
}

/**
 * Walks the body as `canonicalPrompt(body, blockChars * maxBlocks)` does, feeding the hasher.
 * Undefined when the body carries no prompt, or an empty one (the reference's `!text`).
 */
export function promptBlocks(body: Record<string, unknown>, blockChars: number, maxBlocks: number, seed: bigint): PromptBlocks | undefined {
  const maxChars = blockChars * maxBlocks;
  const h = new BlockHasher(blockChars, maxBlocks, seed);
  let parts = 0;
  // The reference's running length: each part's length plus one separator.
  let length = 0;
  /** Starts a part (a separator before every part but the first). */
  const begin = () => {
    if (parts++ > 0) h.feed(SEP);
  };
  /** Ends a part of `chars` characters; true when the reference would stop adding parts. */
  const end = (chars: number) => {
    length += chars + 1;
    return length >= maxChars;
  };

  const tools = body['tools'];
  let toolsJson: string | undefined;
  if (Array.isArray(tools) && tools.length > 0) toolsJson = stableJson(tools);
  const messages = body['messages'];
  const prompt = body['prompt'];
  const badPrompt = !Array.isArray(messages) && prompt !== undefined && typeof prompt !== 'string' && !Array.isArray(prompt);
  // The reference returns no text for a prompt of another type, unless the tools part alone
  // already reached maxChars (it returns before looking at the prompt).
  if (badPrompt && (toolsJson === undefined || 5 + 1 + toolsJson.length + 1 < maxChars)) return undefined;

  walk: {
    if (toolsJson !== undefined) {
      begin();
      h.feed('tools');
      h.feed(SEP);
      h.feed(toolsJson);
      if (end(6 + toolsJson.length) || h.done) break walk;
    }
    if (Array.isArray(messages)) {
      for (const m of messages) {
        if (m === null || typeof m !== 'object') continue;
        const msg = m as Record<string, unknown>;
        const role = typeof msg['role'] === 'string' ? msg['role'] : '';
        begin();
        h.feed(role);
        h.feed(SEP);
        const chars = role.length + 1 + feedContent(h, msg['content']);
        if (end(chars) || h.done) break;
      }
    } else if (prompt !== undefined) {
      if (typeof prompt === 'string') {
        begin();
        h.feed(prompt);
      } else if (Array.isArray(prompt)) {
        for (const x of prompt) {
          const s = typeof x === 'string' ? x : stableJson(x);
          begin();
          h.feed(s);
          if (end(s.length) || h.done) break;
        }
      }
    }
  }
  if (parts === 0 || h.total === 0) return undefined;
  return { chain: h.chain, short: h.chain.length === 0 ? hashText(h.rest, seed) : undefined };
}

/** Feeds message content as prompt.ts's contentText renders it; returns its length. */
function feedContent(h: BlockHasher, content: unknown): number {
  if (typeof content === 'string') {
    h.feed(content);
    return content.length;
  }
  if (!Array.isArray(content)) {
    const s = content === undefined || content === null ? '' : stableJson(content);
    h.feed(s);
    return s.length;
  }
  let chars = 0;
  for (const part of content) {
    let s: string;
    if (part === null || typeof part !== 'object') s = typeof part === 'string' ? part : '';
    else {
      const p = part as Record<string, unknown>;
      s = typeof p['text'] === 'string' ? p['text'] : stableJson(p);
    }
    // Once the last block is full the caller stops: the rest of the length no longer matters.
    if (h.done) break;
    h.feed(s);
    chars += s.length;
  }
  return chars;
}

/** JSON.stringify that never throws, as prompt.ts's. */
function stableJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? '';
  } catch {
    return '';
  }
}
