/**
 * Canonical prompt text: the prompt as the model will see it, flattened to one string, so that two
 * requests whose prompts begin alike produce text that begins alike. Roles and message boundaries
 * are kept (a system prompt and a user message with the same words are different prefixes).
 *
 * Three request shapes, one rendering: the system prompt as a `system` part (and any `system` or
 * `developer` turns that open the conversation), then the tools, then each other turn as
 * `role, content` (and, after the content, a turn's tool calls, tool call id and name: see
 * turnExtras). That is the order engines' chat templates mostly render (the system text, then the
 * tools; Qwen2.5/Hermes, Llama 3.1's JSON template, gpt-oss's system then developer message), so
 * one system prompt with other tools, or none, is still a shared prefix. The same conversation
 * without tools sent as OpenAI chat, Anthropic Messages (`system` + `messages`) or OpenAI Responses
 * (`instructions` + `input`) gives the same text, as the engine's chat template gives it the same
 * tokens; tools, tool calls and a `developer` turn are written differently by each API, and from
 * there the texts differ. A field of the wrong type is left out (the engine answers its own 400);
 * nothing here throws.
 */

/** Which request shape a path carries; decided once per request from the path's last segment(s). */
export type PromptApi = 'openai' | 'messages' | 'responses';

/**
 * `…/messages` is Anthropic's Messages API, `…/responses` OpenAI's Responses API, anything else an
 * OpenAI chat or completions body. By suffix, so a route prefix (`/openai/v1/responses`) keeps it.
 */
export function promptApiOf(path: string): PromptApi {
  if (path.endsWith('/messages')) return 'messages';
  if (path.endsWith('/responses')) return 'responses';
  return 'openai';
}

/**
 * Between parts: ASCII RS (record separator), which prompts rarely carry and which only needs to be
 * stable. One byte on purpose: a character above U+00FF (U+241E, used before) made V8 store the
 * whole canonical prompt as a two-byte string, and joining 400 KB cost 3x as much.
 */
export const SEP = '\u001e';

/**
 * Canonical text of an OpenAI chat or completions body, or undefined when it carries no prompt.
 * Stops adding parts once it has `maxChars` characters (keys read only a prefix): a body of a
 * million tiny messages or token ids then costs what its prefix costs, not a string per element.
 */
export function canonicalPrompt(body: Record<string, unknown>, maxChars = Infinity): string | undefined {
  const parts = new Parts(maxChars, true);
  const messages = body['messages'];
  if (Array.isArray(messages)) {
    parts.turns(messages, body['tools']);
    return parts.text();
  }
  // A completions body: the tools (if any), then the prompt.
  if (parts.tools(body['tools']) || body['prompt'] === undefined) return parts.text();
  const p = firstPrompt(body['prompt']);
  // A string is one part whatever its length.
  if (typeof p === 'string') parts.add(p);
  // Token ids, joined with SEP like the parts themselves, so one part per element gives the same text.
  else if (Array.isArray(p)) {
    for (const x of p) if (parts.add(typeof x === 'string' ? x : stableJson(x))) break;
  } else return undefined;
  return parts.text();
}

/**
 * The one prompt a completions body's `prompt` is keyed on. A list of strings or of token-id lists
 * is a batch: the engine runs each prompt as a request of its own, so no worker ever holds them
 * joined, and the first stands for the batch (`["A", "B"]` keys as `"A"`, `[[ids]]` as `[ids]`).
 * A string, a list of token ids or anything else is itself.
 */
export function firstPrompt(p: unknown): unknown {
  if (!Array.isArray(p) || p.length === 0) return p;
  const first: unknown = p[0];
  return typeof first === 'string' || Array.isArray(first) ? first : p;
}

/**
 * Canonical text of an Anthropic Messages body: `system` (a string or text blocks, run together),
 * `tools`, then `messages` (content a string or blocks), rendered as `canonicalPrompt` renders chat.
 */
export function messagesPrompt(body: Record<string, unknown>, maxChars = Infinity): string | undefined {
  const parts = new Parts(maxChars);
  const system = body['system'];
  if ((typeof system === 'string' && system.length > 0) || Array.isArray(system)) {
    if (parts.add(`system${SEP}${contentText(system, SYSTEM_JOIN)}`)) return parts.text();
  }
  const messages = body['messages'];
  if (Array.isArray(messages)) parts.turns(messages, body['tools']);
  else parts.tools(body['tools']);
  return parts.text();
}

/**
 * Canonical text of an OpenAI Responses body: `instructions` (the system prompt), then `input`: a
 * string (one user turn) or items; an item with a `role` is a turn, any other item (function
 * calls and their outputs, reasoning, references) is its type and its JSON. `tools` come after the
 * instructions and the items that open `input` with instructions (`system` or `developer`).
 */
export function responsesPrompt(body: Record<string, unknown>, maxChars = Infinity): string | undefined {
  const parts = new Parts(maxChars);
  const instructions = body['instructions'];
  if (typeof instructions === 'string' && instructions.length > 0 && parts.add(`system${SEP}${instructions}`)) return parts.text();
  const input = body['input'];
  if (Array.isArray(input)) parts.items(input, body['tools']);
  else if (!parts.tools(body['tools']) && typeof input === 'string') parts.add(`user${SEP}${input}`);
  return parts.text();
}

/**
 * The roles of the instructions: the turns with one of them that open a conversation come before
 * the tools, as chat templates render the system text, then the tools.
 */
export function isInstructionRole(role: unknown): boolean {
  return role === 'system' || role === 'developer';
}

/**
 * Parts joined by SEP, that stop accepting once `maxChars` characters are in (keys read only a
 * prefix). `chat`: the turns are OpenAI chat messages, whose content parts are read as chatPartText
 * reads them; Messages blocks and Responses parts are other APIs' parts, read as they always were.
 */
class Parts {
  private readonly parts: string[] = [];
  private length = 0;
  constructor(
    private readonly maxChars: number,
    private readonly chat = false,
  ) {}

  /** Adds a part; true when the text is now long enough. */
  add(part: string): boolean {
    this.parts.push(part);
    this.length += part.length + SEP.length;
    return this.length >= this.maxChars;
  }

  /** Tool definitions, when the field is a non-empty list; true when the text is long enough. */
  tools(tools: unknown): boolean {
    const json = toolsJson(tools);
    return json !== undefined && this.add(`tools${SEP}${json}`);
  }

  /**
   * Chat-shaped turns: each object in the list is a turn, its `role` ('' when not a string) and
   * `content`; other values are skipped. The tools go after the turns that open the list with
   * instructions (isInstructionRole), before the first other turn (or after them all).
   */
  turns(messages: readonly unknown[], tools: unknown): void {
    this.inOrder(messages, tools, false);
  }

  /**
   * Responses input items, the tools placed as in `turns`: an item with a string `role` is a
   * turn, any other object its type and its JSON; arrays and other values are skipped.
   */
  items(input: readonly unknown[], tools: unknown): void {
    this.inOrder(input, tools, true);
  }

  /** The one loop of `turns` and `items`: they differ only in arrays (skipped as items) and role-less entries. */
  private inOrder(list: readonly unknown[], tools: unknown, responses: boolean): void {
    let toolsDue = true;
    for (const x of list) {
      if (x === null || typeof x !== 'object' || (responses && Array.isArray(x))) continue;
      const m = x as Record<string, unknown>;
      const role = m['role'];
      if (toolsDue && !isInstructionRole(role)) {
        toolsDue = false;
        if (this.tools(tools)) return;
      }
      let part: string;
      if (typeof role === 'string' || !responses) {
        const r = typeof role === 'string' ? role : '';
        part = `${r}${SEP}${contentText(m['content'], PART_JOIN, r === 'user', this.chat)}${turnExtras(m)}`;
      } else part = `${typeof m['type'] === 'string' ? m['type'] : ''}${SEP}${stableJson(withoutCacheControl(m))}`;
      if (this.add(part)) return;
    }
    if (toolsDue) this.tools(tools);
  }

  text(): string | undefined {
    return this.parts.length > 0 ? this.parts.join(SEP) : undefined;
  }
}

/**
 * What a turn carries besides its content that chat templates render: an assistant turn's
 * `reasoning` (see below) and `tool_calls` (their JSON), a tool turn's `tool_call_id`, a turn's
 * `name`, each only when of the right type, as `SEP label SEP value` after the content. Two agent
 * conversations that differ only in a call's arguments are different prompts. '' for a turn
 * without them, so its text is unchanged.
 *
 * Earlier turns' reasoning: vLLM reads an assistant message's `reasoning` (a string) and hands it
 * to the chat template as both `reasoning` and `reasoning_content` (`_parse_chat_message_content`
 * in vllm/entrypoints/chat_utils.py). Many templates drop it (DeepSeek-R1's, Llama's), but those
 * made for interleaved thinking render it inside their think tags, at least for the assistant
 * turns since the last user turn, where an agent's tool loop runs (Qwen3's, GLM-4.5's, MiniMax-M2's,
 * Kimi K2's). So it counts: where it is rendered, requests that differ in it are different prompts;
 * where it is dropped, a client sends the same reasoning back with each request of a conversation,
 * which then shares its blocks as before. `reasoning_content` on a message is not read: vLLM no
 * longer reads it (it was renamed `reasoning`), so it never reaches the template. A Messages
 * `thinking` block and a Responses `reasoning` item already count, by their JSON; a chat `thinking`
 * content part counts by its text, as vLLM reads it (chatPartText).
 */
export function turnExtras(msg: Record<string, unknown>): string {
  let s = '';
  const reasoning = msg['reasoning'];
  if (msg['role'] === 'assistant' && typeof reasoning === 'string' && reasoning.length > 0) s += `${SEP}reasoning${SEP}${reasoning}`;
  const calls = msg['tool_calls'];
  if (Array.isArray(calls) && calls.length > 0) s += `${SEP}tool_calls${SEP}${stableJson(calls)}`;
  const id = msg['tool_call_id'];
  if (typeof id === 'string' && id.length > 0) s += `${SEP}tool_call_id${SEP}${id}`;
  const name = msg['name'];
  if (typeof name === 'string' && name.length > 0) s += `${SEP}name${SEP}${name}`;
  return s;
}

/**
 * Between a turn's content parts: a newline, as vLLM joins a message's text parts before the chat
 * template sees them (`_parse_chat_message_content_parts` in vllm/entrypoints/chat_utils.py), so
 * parts ["A", "B"] are the prompt "A\nB", not "AB". Messages' `system` blocks are run together
 * instead (SYSTEM_JOIN): vLLM's Messages endpoint makes one system message of their texts
 * joined with "" (`_convert_system_message` in vllm/entrypoints/anthropic/serving.py).
 */
export const PART_JOIN = '\n';
export const SYSTEM_JOIN = '';

/**
 * Message content: a string, or an array of parts (OpenAI content parts, Anthropic content blocks,
 * Responses input parts) joined with `join`, each as partText reads it: text parts by their text,
 * others (images, tool calls and results) by their JSON (partJson). Anthropic's `cache_control`
 * marks where the client wants a cache breakpoint, not what the model reads, so it never changes
 * the text. `chat`: the parts of an OpenAI chat message (see chatPartText).
 */
function contentText(content: unknown, join = PART_JOIN, userTurn = false, chat = false): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content === undefined || content === null ? '' : stableJson(content);
  let s = '';
  let kept = 0;
  for (const part of content) {
    const t = part === null || typeof part !== 'object' ? (typeof part === 'string' ? part : '') : partText(part as Record<string, unknown>, userTurn, chat);
    // A part the engine drops is not in the prompt, nor is the join before it.
    if (t === undefined) continue;
    s += kept++ > 0 ? join + t : t;
  }
  return s;
}

/**
 * One content part as hashed, shared by both renderers: in a chat message, the text chatPartText
 * finds, or undefined for a part vLLM drops (the renderers then leave it out with the join before
 * it); else a string `text` (`text`, `input_text`, `output_text` parts and Messages text blocks);
 * else its JSON (partJson).
 */
export function partText(p: Record<string, unknown>, userTurn: boolean, chat: boolean): string | undefined {
  if (chat) {
    const t = chatPartText(p);
    if (t === DROPPED) return undefined;
    if (t !== undefined) return t;
  }
  const text = p['text'];
  return typeof text === 'string' ? text : partJson(p, userTurn);
}

/**
 * The text of an OpenAI chat content part that vLLM reads as text from a field other than `text`:
 * a `thinking` part's `thinking`, a `refusal` part's `refusal` and a `tool_reference` part's
 * `name` (below); or DROPPED for a part vLLM leaves out. vLLM's chat parser
 * (`_parse_chat_message_content_part` and its parser map in vllm/entrypoints/chat_utils.py) takes
 * the text of `text`, `input_text`, `output_text`, `refusal` and `thinking` parts alike, in any
 * role, and joins it with the message's other texts (or hands the template a text part of it), so
 * `[text A, thinking B]` is the prompt "A\nB" to the engine and must share its blocks; hashed by
 * its JSON it shared none. The type's own field counts even where the part also has a `text`, as
 * in vLLM. Undefined (the part read as before) when that field is of another type, or for a
 * thinking part missing: vLLM has no text for such a part either, so there is no text to match.
 *
 * A `text` or `refusal` part whose field is null or missing is dropped (DROPPED): vLLM skips such
 * a part (`PART_TYPES_TO_SKIP_NONE_CONTENT` in chat_utils.py) before joining the others, whatever
 * the template's content format, so `[A, {type: "text", text: null}, B]` is the prompt "A\nB".
 * Hashed by its JSON, as it was, the turn shared no block with the same turn without it. Only
 * those two types: vLLM keeps a null-texted `thinking`, `input_text` or `output_text` part for a
 * template that takes the parts as a list, so what the engine sees there depends on the template.
 *
 * A `tool_reference` part (a deferred tool named by its `name`) is its name: vLLM hands a
 * template that takes content as a string the name as the part's text, joined with the others. A
 * template that takes the parts as a list gets the part itself, to expand as it will, which
 * kvgate cannot know; the string form is the common one. Without a string `name` the part keeps
 * its JSON, as before.
 *
 * Only chat: vLLM's Messages endpoint moves a `thinking` block to the turn's `reasoning` instead
 * (`_convert_anthropic_to_openai_request` in vllm/entrypoints/anthropic/serving.py), so a Messages
 * block keeps its JSON. Responses message parts keep theirs too: vLLM turns Responses items into
 * chat messages on a path of its own, which this reading was not checked against.
 *
 * SGLang differs. Its chat request schema (the content part union in its OpenAI protocol.py)
 * rejects `refusal`, `input_text` and `output_text` parts, and takes `thinking` (or `reasoning`)
 * parts in assistant turns only, with exactly one of `thinking` and `text`. Then
 * `process_content_for_template_format` (python/sglang/srt/parser/jinja_template_utils.py, in the
 * version read) keeps only `text` parts, joined with a space, for a template that takes content as
 * a string, so a thinking part is not in that prompt at all; for a template that iterates over the
 * parts it hands the part on, for the template to render or skip. kvgate follows vLLM: on such
 * an SGLang, requests that differ only in a thinking part are one prompt that kvgate keys apart
 * from that part on (as it did when it hashed the part's JSON), which a conversation rarely meets,
 * as its client sends the same part back with each request.
 */
function chatPartText(p: Record<string, unknown>): string | typeof DROPPED | undefined {
  const type = p['type'];
  if (type === 'text' || type === 'refusal') {
    const t = p[type];
    // vLLM skips a text or refusal part whose field is null or missing, whatever else it holds.
    if (t === null || t === undefined) return DROPPED;
    // A `text` part's string is read by partText as any part's `text` is; a field of another type
    // keeps the part's JSON, as before.
    return type === 'refusal' && typeof t === 'string' ? t : undefined;
  }
  const t = type === 'thinking' ? p['thinking'] : type === 'tool_reference' ? p['name'] : undefined;
  return typeof t === 'string' ? t : undefined;
}

/** chatPartText's answer for a part vLLM leaves out of the prompt altogether. */
const DROPPED = Symbol('dropped');

/**
 * A content part without text, as hashed: its JSON without cache marks (withoutCacheControl). In
 * a user turn, a `tool_result` whose `content` is a list of text blocks and nothing else counts as
 * if that content were their texts joined with a newline: vLLM's Messages endpoint makes the same
 * tool message of either (`_convert_user_tool_result` in vllm/entrypoints/anthropic/serving.py
 * takes a string as it is and joins the text blocks' texts with "\n"), so `content: "A"` and
 * `content: [{type: "text", text: "A"}]` are one prompt to the engine and share their blocks. The
 * string form is the one kept, so its hashes are what they were. Anywhere else the list stays: vLLM
 * sends a result's images on as a turn of their own, and writes an assistant turn's tool_result as
 * the Python text of its content, in which a list is not its texts.
 */
export function partJson(p: Record<string, unknown>, userTurn: boolean): string {
  const block = withoutCacheControl(p);
  const text = userTurn && p['type'] === 'tool_result' ? textBlocksText(p['content']) : undefined;
  // `content` is already a key of the block, so the spread keeps the keys' order and the JSON's.
  return stableJson(text === undefined ? block : { ...block, content: text });
}

/** The texts of a list of text blocks joined with a newline; undefined for anything else. */
function textBlocksText(content: unknown): string | undefined {
  if (!Array.isArray(content)) return undefined;
  let s = '';
  for (let i = 0; i < content.length; i++) {
    const b: unknown = content[i];
    if (b === null || typeof b !== 'object') return undefined;
    const t = (b as Record<string, unknown>)['text'];
    if ((b as Record<string, unknown>)['type'] !== 'text' || typeof t !== 'string') return undefined;
    s += i > 0 ? `\n${t}` : t;
  }
  return s;
}

/**
 * A block without Anthropic's `cache_control` (a cache breakpoint, not text the model reads), nor
 * that of the blocks nested in it where the Messages API allows one: a `content` list (a
 * tool_result's text, image, search_result and document blocks; a search_result's text blocks) and
 * a content document's `source.content`. Anywhere else (a tool call's `input`) it is data and
 * counts. Copies only what carries a mark; a block without one is returned as it is.
 */
export function withoutCacheControl(p: Record<string, unknown>): Record<string, unknown> {
  let out = p;
  if ('cache_control' in p) {
    const { cache_control: _ignored, ...rest } = p;
    out = rest;
  }
  const content = p['content'];
  if (Array.isArray(content)) {
    const stripped = blocksWithoutCacheControl(content);
    if (stripped !== content) out = { ...out, content: stripped };
  }
  const source = p['source'];
  if (source !== null && typeof source === 'object' && !Array.isArray(source)) {
    const inner = (source as Record<string, unknown>)['content'];
    if (Array.isArray(inner)) {
      const stripped = blocksWithoutCacheControl(inner);
      if (stripped !== inner) out = { ...out, source: { ...(source as Record<string, unknown>), content: stripped } };
    }
  }
  return out;
}

/** A list of blocks, each withoutCacheControl; the list itself when none carried a mark. */
function blocksWithoutCacheControl(list: readonly unknown[]): readonly unknown[] {
  let out: unknown[] | undefined;
  for (let i = 0; i < list.length; i++) {
    const b = list[i];
    if (b === null || typeof b !== 'object' || Array.isArray(b)) continue;
    const stripped = withoutCacheControl(b as Record<string, unknown>);
    if (stripped !== b) (out ??= list.slice())[i] = stripped;
  }
  return out ?? list;
}

/**
 * The tools part's JSON: undefined unless `tools` is a non-empty list. A tool definition may carry
 * a `cache_control` mark (Messages), which is left out like a block's.
 */
export function toolsJson(tools: unknown): string | undefined {
  return Array.isArray(tools) && tools.length > 0 ? stableJson(blocksWithoutCacheControl(tools)) : undefined;
}

/** JSON.stringify that never throws (bodies came from JSON.parse, so no cycles or BigInts). */
export function stableJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? '';
  } catch {
    return '';
  }
}
