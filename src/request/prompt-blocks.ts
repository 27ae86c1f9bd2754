/**
 * The canonical prompt's block hashes in one pass over the parsed body, without building the
 * prompt. Gives exactly what `chainedBlockHashes(text, ...)` of prompt.ts's text gives for each
 * request shape (OpenAI chat and completions, Anthropic Messages, OpenAI Responses; the reference,
 * kept in prompt.ts and hashing.ts as the tests' oracle), but:
 *  - no part string (`role + SEP + content`) and no joined prompt are built: each block is
 *    assembled from slices of the body's own strings (V8 slices share their parent's characters),
 *    so a 400 KB body no longer copies its first 128 K characters twice before hashing them;
 *  - it stops walking the body as soon as the last block it hashes is full.
 * A block is still made a string of its 256 characters before encoding, so a surrogate pair
 * split between two parts, or a lone surrogate, encodes exactly as it does in the joined text.
 */
import { DIRECT_BYTES, directXxh64, xxh, type DirectXxh64 } from '../util/xxhash.js';
import { hashText } from './hashing.js';
import { firstPrompt, isInstructionRole, PART_JOIN, partText, SEP, stableJson, SYSTEM_JOIN, toolsJson as toolsPartJson, turnExtras, withoutCacheControl, type PromptApi } from './prompt.js';

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
  /**
   * The current block's characters so far. Pieces are appended with `+`: V8 makes a rope (a cons
   * string) of them, flattened once when the full block is encoded, so this is a join without an
   * array to fill and empty per block (emptying one by setting its length is V8's slow path).
   */
  private pending = '';
  private prev: bigint;
  private readonly h64 = xxh().h64;
  /**
   * The direct hasher while runs are tried: when loaded, and until a run is found not to be ASCII
   * (then every later block of this prompt is hashed one string at a time, as before runs).
   */
  private direct: DirectXxh64 | undefined;
  /** Blocks in the first run of each string fed, and in the longest (runs double from one to the other). */
  private readonly firstRun: number;
  private readonly longestRun: number;
  /** Blocks in the next run of the string being fed. */
  private run = 0;
  /** The direct hasher's memory, `longestRun` blocks long. */
  private readonly runBytes: Uint8Array | undefined;

  constructor(
    private readonly blockChars: number,
    private readonly maxBlocks: number,
    seed: bigint,
  ) {
    this.prev = seed;
    // Runs are short, 1 Ki to 4 Ki characters (4 to 16 blocks of 256), because a run that is not
    // ASCII is encoded for nothing, and V8 encodes everything after a string's first non-ASCII
    // character about fifteen times slower than ASCII (~1 ns a character): so a prompt that is not
    // all ASCII pays at most one such run, mostly a short one, over what it cost before runs.
    // A run is one encodeInto call and one string slice, small against the 16 blocks it hashes.
    // An ASCII run takes a byte a character, so it fits the module's memory; a block longer than
    // that memory is hashed through the library.
    const direct = directXxh64();
    this.direct = direct !== undefined && blockChars <= DIRECT_BYTES ? direct : undefined;
    this.firstRun = Math.max(1, Math.floor(1024 / blockChars));
    this.longestRun = Math.max(1, Math.floor(4096 / blockChars));
    this.runBytes = this.direct === undefined ? undefined : runView(this.direct, this.longestRun * blockChars);
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
    this.run = this.firstRun;
    while (pos < s.length && !this.done) {
      const need = this.blockChars - this.pending.length;
      const left = s.length - pos;
      if (left < need) {
        this.pending += pos === 0 ? s : s.slice(pos);
        this.total += left;
        return;
      }
      // Whole blocks of this string alone: hashed as a run while the text is ASCII.
      if (this.pending.length === 0 && this.direct !== undefined) {
        const run = Math.min(Math.floor(left / this.blockChars), this.run, this.maxBlocks - this.chain.length);
        if (this.asciiRun(s, pos, run)) {
          pos += run * this.blockChars;
          this.total += run * this.blockChars;
          this.run = Math.min(this.run * 2, this.longestRun);
          continue;
        }
        this.direct = undefined;
      }
      const block = this.pending + s.slice(pos, pos + need);
      this.pending = '';
      pos += need;
      this.total += need;
      // xxhash-wasm's h64 encodes the string straight into the WebAssembly memory it hashes (one
      // encodeInto, the same UTF-8 bytes as encoding it anywhere else): no scratch buffer, no
      // subarray view and no second copy of the bytes per block, as h64Raw would need.
      this.prev = this.h64(block, this.prev);
      this.chain.push(this.prev);
    }
  }

  /**
   * `run` whole blocks of `s` from `pos`, when every character of them is ASCII: encoded into the
   * direct hasher's memory with one `encodeInto` and each block hashed where it lies. ASCII is one
   * byte a character, so block i's bytes are exactly `bytes[i × blockChars, (i + 1) × blockChars)`,
   * the UTF-8 of its text, which is what h64 of the block's string hashes. Any other character
   * takes two to four bytes for its one or two UTF-16 units (a lone surrogate three), so the
   * bytes outnumber the characters (or the run's bytes overflow the memory given and fewer are
   * read): then nothing is hashed and false tells the caller to hash blocks one string at a time,
   * where a surrogate pair cut by a block's end encodes as it always has.
   */
  private asciiRun(s: string, pos: number, run: number): boolean {
    const chars = run * this.blockChars;
    const d = this.direct!;
    const { read, written } = encoder.encodeInto(pos === 0 && chars === s.length ? s : s.slice(pos, pos + chars), this.runBytes!);
    if (read !== chars || written !== chars) return false;
    let prev = this.prev;
    for (let i = 0, at = 0; i < run; i++, at += this.blockChars) {
      prev = d.at(at, this.blockChars, prev);
      this.chain.push(prev);
    }
    this.prev = prev;
    return true;
  }
}

const encoder = new TextEncoder();

/** The first `length` bytes of the direct hasher's memory, one view per length (block_chars rarely changes). */
let runViewCache: Uint8Array | undefined;
function runView(d: DirectXxh64, length: number): Uint8Array {
  if (runViewCache === undefined || runViewCache.length !== length || runViewCache.buffer !== d.bytes.buffer) runViewCache = d.bytes.subarray(0, length);
  return runViewCache;
}

/**
 * The canonical prompt as prompt.ts renders it, fed part by part into a hasher: a part is its
 * pieces (`role`, SEP, content...) fed in turn, and the running length decides where the
 * reference stops adding parts, exactly as prompt.ts's `Parts` does.
 */
class HashedParts {
  private parts = 0;
  private length = 0;

  /** `chat`: the turns are OpenAI chat messages, their parts read as prompt.ts's `Parts` reads them (partText). */
  constructor(
    readonly h: BlockHasher,
    private readonly maxChars: number,
    private readonly chat: boolean,
  ) {}

  /** Starts a part: a separator before every part but the first. */
  begin(): void {
    if (this.parts++ > 0) this.h.feed(SEP);
  }

  /** Ends a part of `chars` characters; true when the reference stops adding parts (or every block is hashed). */
  end(chars: number): boolean {
    this.length += chars + 1;
    return this.length >= this.maxChars || this.h.done;
  }

  /** A part of one string. */
  add(s: string): boolean {
    this.begin();
    this.h.feed(s);
    return this.end(s.length);
  }

  /** A part `label SEP text`. */
  labelled(label: string, text: string): boolean {
    this.begin();
    this.h.feed(label);
    this.h.feed(SEP);
    this.h.feed(text);
    return this.end(label.length + 1 + text.length);
  }

  /**
   * A part `role SEP content extras` with content rendered as contentText renders it, extras as
   * turnExtras renders them from `message`; not rendered once every block is hashed.
   */
  turn(role: string, content: unknown, message?: Record<string, unknown>, join = PART_JOIN): boolean {
    this.begin();
    this.h.feed(role);
    this.h.feed(SEP);
    const chars = feedContent(this.h, content, join, role === 'user', this.chat);
    const extras = message === undefined || this.h.done ? '' : turnExtras(message);
    this.h.feed(extras);
    return this.end(role.length + 1 + chars + extras.length);
  }

  /** Tool definitions, when the field is a non-empty list; true when the text is long enough. */
  tools(tools: Tools): boolean {
    const json = tools.json();
    return json !== undefined && this.labelled('tools', json);
  }

  /** Chat-shaped turns, the tools after the leading instruction turns, as prompt.ts's `Parts.turns`. */
  turns(messages: readonly unknown[], tools: Tools): void {
    this.inOrder(messages, tools, false);
  }

  /**
   * Responses input items, the tools after the leading instruction items, as prompt.ts's
   * `responsesPrompt`: an item with a role is a turn, any other its type and its JSON.
   */
  items(input: readonly unknown[], tools: Tools): void {
    this.inOrder(input, tools, true);
  }

  /** The one loop of `turns` and `items`: they differ in arrays (skipped as items) and role-less entries. */
  private inOrder(list: readonly unknown[], tools: Tools, responses: boolean): void {
    let toolsDue = true;
    for (const x of list) {
      if (x === null || typeof x !== 'object' || (responses && Array.isArray(x))) continue;
      const m = x as Record<string, unknown>;
      const role = m['role'];
      if (toolsDue && !isInstructionRole(role)) {
        toolsDue = false;
        if (this.tools(tools)) return;
      }
      const full =
        typeof role === 'string' || !responses
          ? this.turn(typeof role === 'string' ? role : '', m['content'], m)
          : this.labelled(typeof m['type'] === 'string' ? m['type'] : '', stableJson(withoutCacheControl(m)));
      if (full) return;
    }
    if (toolsDue) this.tools(tools);
  }

  result(seed: bigint): PromptBlocks | undefined {
    // The reference's `!text`: no part, or parts that join to the empty string.
    if (this.parts === 0 || this.h.total === 0) return undefined;
    return { chain: this.h.chain, short: this.h.chain.length === 0 ? hashText(this.h.rest, seed) : undefined };
  }
}

/**
 * The block hashes of the canonical prompt of a body of the given shape (prompt.ts:
 * `canonicalPrompt`, `messagesPrompt`, `responsesPrompt`), read up to `blockChars × maxBlocks`
 * characters as keys.ts reads it. Undefined when the body carries no prompt or an empty one.
 */
export function promptBlocks(api: PromptApi, body: Record<string, unknown>, blockChars: number, maxBlocks: number, seed: bigint): PromptBlocks | undefined {
  const maxChars = blockChars * maxBlocks;
  // Chat content parts are read as canonicalPrompt reads them, the other APIs' as theirs.
  const parts = new HashedParts(new BlockHasher(blockChars, maxBlocks, seed), maxChars, api === 'openai');
  // The tools' JSON only once a part needs it: the instructions before it often fill every block.
  const tools = lazyTools(body['tools']);
  if (api === 'openai') {
    const messages = body['messages'];
    if (Array.isArray(messages)) parts.turns(messages, tools);
    else {
      const prompt = firstPrompt(body['prompt']);
      // canonicalPrompt returns no text for a prompt of another type, unless the tools part alone
      // already reached maxChars (it returns before looking at the prompt). Decided before hashing.
      const badPrompt = prompt !== undefined && typeof prompt !== 'string' && !Array.isArray(prompt);
      const toolsJson = tools.json();
      if (badPrompt && (toolsJson === undefined || 'tools'.length + 1 + toolsJson.length + 1 < maxChars)) return undefined;
      if (!parts.tools(tools)) {
        if (typeof prompt === 'string') {
          // A single string is one part whatever its length.
          parts.begin();
          parts.h.feed(prompt);
        } else if (Array.isArray(prompt)) {
          for (const x of prompt) if (parts.add(typeof x === 'string' ? x : stableJson(x))) break;
        }
      }
    }
  } else if (api === 'messages') {
    const system = body['system'];
    const hasSystem = (typeof system === 'string' && system.length > 0) || Array.isArray(system);
    if (!(hasSystem && parts.turn('system', system, undefined, SYSTEM_JOIN))) {
      const messages = body['messages'];
      if (Array.isArray(messages)) parts.turns(messages, tools);
      else parts.tools(tools);
    }
  } else {
    const instructions = body['instructions'];
    if (!(typeof instructions === 'string' && instructions.length > 0 && parts.labelled('system', instructions))) {
      const input = body['input'];
      if (Array.isArray(input)) parts.items(input, tools);
      else if (!parts.tools(tools) && typeof input === 'string') parts.labelled('user', input);
    }
  }
  return parts.result(seed);
}

/** A body's tools, rendered as prompt.ts's toolsJson renders them on first use, then kept. */
interface Tools {
  json(): string | undefined;
}

function lazyTools(field: unknown): Tools {
  let json: string | undefined | null = null;
  return { json: () => (json === null ? (json = toolsPartJson(field)) : json) };
}

/**
 * Feeds message content as prompt.ts's contentText renders it, parts joined with `join`, each part
 * as partText reads it for a user turn or another, in a chat message or not; returns its length.
 */
function feedContent(h: BlockHasher, content: unknown, join: string, userTurn: boolean, chat: boolean): number {
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
  let kept = 0;
  for (let i = 0; i < content.length; i++) {
    // Once the last block is full the caller stops: the rest of the length no longer matters.
    if (h.done) break;
    const part: unknown = content[i];
    let s: string | undefined;
    if (part === null || typeof part !== 'object') s = typeof part === 'string' ? part : '';
    else s = partText(part as Record<string, unknown>, userTurn, chat);
    // A part the engine drops (partText): neither it nor the join before it is in the prompt.
    if (s === undefined) continue;
    if (kept++ > 0) {
      h.feed(join);
      chars += join.length;
    }
    h.feed(s);
    chars += s.length;
  }
  return chars;
}
