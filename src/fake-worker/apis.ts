/**
 * The fake worker's Anthropic Messages (`/v1/messages`) and OpenAI Responses (`/v1/responses`)
 * endpoints, as vLLM serves them: requests rendered with the same chat template as chat
 * completions (so the prefix cache sees one conversation whichever API carries it), and the
 * bodies and server-sent events each API's clients expect.
 *
 * Responses are stored (OpenAI's default, `store: true`) in this process's memory, as vLLM keeps
 * them: a request naming a `previous_response_id` this worker did not produce is a 404. That is
 * why a router must send it back to the worker that produced the response.
 */
import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { parseJsonBody } from '../request/body.js';
import { renderChat } from './request.js';

/** One turn as the chat template renders it. */
export interface Turn {
  role: string;
  content: string;
}

export interface ApiRequest {
  model: string | undefined;
  /** Turns before the new output, system first (the stored conversation included). */
  turns: Turn[];
  prompt: string;
  maxTokens: number | undefined;
  stream: boolean;
  /** Responses only: keep the answer for later `previous_response_id` requests. */
  store: boolean;
  previousResponseId?: string;
}

export type ApiParse = { ok: true; value: ApiRequest } | { ok: false; status: 400 | 404; message: string; param?: string };

/** Stored responses (the turns that led to each and its answer); the oldest go past this many. */
export const MAX_STORED_RESPONSES = 10_000;

export class ResponseStore {
  private readonly byId = new LRUCache<string, Turn[]>({ max: MAX_STORED_RESPONSES });
  get(id: string): Turn[] | undefined {
    return this.byId.get(id);
  }
  set(id: string, turns: Turn[]): void {
    this.byId.set(id, turns);
  }
}

const BODY_PROBLEMS = {
  empty: 'the request body is empty',
  not_utf8: 'the request body is not UTF-8',
  not_json: 'the request body is not valid JSON',
  not_object: 'the request body must be a JSON object',
  too_complex: 'the request body is nested too deeply',
} as const;

type Bad = { ok: false; status: 400; message: string; param?: string };
const bad = (message: string, param?: string): Bad => ({ ok: false, status: 400, message, ...(param ? { param } : {}) });

/** Shared fields: model, the token limit, stream. */
function common(body: Record<string, unknown>, limitField: string): Bad | { model: string | undefined; maxTokens: number | undefined; stream: boolean } {
  const model = body['model'];
  if (model !== undefined && typeof model !== 'string') return bad('`model` must be a string', 'model');
  const limit = body[limitField];
  if (limit !== undefined && limit !== null && !(typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1)) {
    return bad(`\`${limitField}\` must be a positive integer`, limitField);
  }
  const stream = body['stream'];
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') return bad('`stream` must be a boolean', 'stream');
  return { model: model as string | undefined, maxTokens: typeof limit === 'number' ? limit : undefined, stream: stream === true };
}

/** Anthropic Messages: `system` (a string or text blocks), `messages` (content a string or blocks), `tools`. */
export function parseMessagesRequest(raw: Buffer): ApiParse {
  const parsed = parseJsonBody(raw);
  if (!parsed.ok) return bad(BODY_PROBLEMS[parsed.reason]);
  const body = parsed.value;
  const c = common(body, 'max_tokens');
  if ('ok' in c) return c;
  const turns: Turn[] = [];
  const system = body['system'];
  if (system !== undefined && system !== null) {
    const text = blocksText(system, true);
    if (text === undefined) return bad('`system` must be a string or an array of text blocks', 'system');
    if (text !== '') turns.push({ role: 'system', content: text });
  }
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0) return bad('`messages` must be a non-empty array', 'messages');
  for (const [i, m] of messages.entries()) {
    if (m === null || typeof m !== 'object' || Array.isArray(m)) return bad(`messages.${i} must be an object`, 'messages');
    const msg = m as Record<string, unknown>;
    if (msg['role'] !== 'user' && msg['role'] !== 'assistant') return bad(`messages.${i}.role must be "user" or "assistant"`, 'messages');
    const content = blocksText(msg['content'], false);
    if (content === undefined) return bad(`messages.${i}.content must be a string or an array of content blocks`, 'messages');
    turns.push({ role: msg['role'], content });
  }
  const tools = toolsText(body['tools']);
  if (tools === null) return bad('`tools` must be an array', 'tools');
  return { ok: true, value: { model: c.model, turns, prompt: renderChat(turns, tools), maxTokens: c.maxTokens, stream: c.stream, store: false } };
}

/**
 * OpenAI Responses: `instructions`, `input` (a string or items), `tools`, and
 * `previous_response_id`, whose stored turns come first (the instructions are not carried over).
 */
export function parseResponsesRequest(raw: Buffer, stored: ResponseStore): ApiParse {
  const parsed = parseJsonBody(raw);
  if (!parsed.ok) return bad(BODY_PROBLEMS[parsed.reason]);
  const body = parsed.value;
  const c = common(body, 'max_output_tokens');
  if ('ok' in c) return c;
  const turns: Turn[] = [];
  const instructions = body['instructions'];
  if (instructions !== undefined && instructions !== null && typeof instructions !== 'string') return bad('`instructions` must be a string', 'instructions');
  if (instructions) turns.push({ role: 'system', content: instructions });
  const previous = body['previous_response_id'];
  let previousResponseId: string | undefined;
  if (previous !== undefined && previous !== null) {
    if (typeof previous !== 'string') return bad('`previous_response_id` must be a string', 'previous_response_id');
    const earlier = stored.get(previous);
    if (!earlier) return { ok: false, status: 404, message: `Response with id '${previous}' not found.`, param: 'previous_response_id' };
    turns.push(...earlier.filter((t) => t.role !== 'system'));
    previousResponseId = previous;
  }
  const input = body['input'];
  if (typeof input === 'string') turns.push({ role: 'user', content: input });
  else if (Array.isArray(input) && input.length > 0) {
    for (const [i, item] of input.entries()) {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) return bad(`input[${i}] must be an object`, 'input');
      const it = item as Record<string, unknown>;
      if (typeof it['role'] === 'string') {
        const content = blocksText(it['content'], false);
        if (content === undefined) return bad(`input[${i}].content must be a string or an array of content parts`, 'input');
        turns.push({ role: it['role'], content });
      } else if (typeof it['type'] === 'string') {
        turns.push({ role: it['type'] === 'function_call_output' ? 'tool' : 'assistant', content: JSON.stringify(it) });
      } else return bad(`input[${i}] must be a message or a typed item`, 'input');
    }
  } else return bad('`input` must be a string or a non-empty array of items', 'input');
  const tools = toolsText(body['tools']);
  if (tools === null) return bad('`tools` must be an array', 'tools');
  const store = body['store'] !== false;
  return {
    ok: true,
    value: { model: c.model, turns, prompt: renderChat(turns, tools), maxTokens: c.maxTokens, stream: c.stream, store, ...(previousResponseId ? { previousResponseId } : {}) },
  };
}

/** A string, or blocks whose text counts (others by their JSON); `textOnly` refuses other blocks. */
function blocksText(v: unknown, textOnly: boolean): string | undefined {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) return undefined;
  const out: string[] = [];
  for (const b of v) {
    if (b === null || typeof b !== 'object' || Array.isArray(b)) return undefined;
    const block = b as Record<string, unknown>;
    if (typeof block['text'] === 'string') out.push(block['text']);
    else if (textOnly) return undefined;
    else out.push(JSON.stringify(block));
  }
  return out.join('');
}

/** Tool definitions as the template renders them; undefined when none, null when not a list. */
function toolsText(v: unknown): string | undefined | null {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) return null;
  return v.length > 0 ? JSON.stringify(v) : undefined;
}

export function newId(prefix: 'msg' | 'resp'): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}

export interface Outcome {
  id: string;
  model: string;
  text: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** The generation stopped at the client's token limit. */
  truncated: boolean;
}

/** A Messages answer, whole. */
export function messageBody(o: Outcome): unknown {
  return {
    id: o.id,
    type: 'message',
    role: 'assistant',
    model: o.model,
    content: [{ type: 'text', text: o.text }],
    stop_reason: o.truncated ? 'max_tokens' : 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: o.promptTokens - o.cachedTokens, cache_read_input_tokens: o.cachedTokens, output_tokens: o.completionTokens },
  };
}

/** Anthropic's server-sent events: a named event per line pair. */
export function namedEvent(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}

export function messageStartEvents(id: string, model: string): string {
  return (
    namedEvent('message_start', {
      type: 'message_start',
      message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, output_tokens: 0 } },
    }) + namedEvent('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })
  );
}

export function messageDeltaEvent(text: string): string {
  return namedEvent('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } });
}

export function messageEndEvents(o: Outcome): string {
  return (
    namedEvent('content_block_stop', { type: 'content_block_stop', index: 0 }) +
    namedEvent('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: o.truncated ? 'max_tokens' : 'end_turn', stop_sequence: null },
      usage: { input_tokens: o.promptTokens - o.cachedTokens, cache_read_input_tokens: o.cachedTokens, output_tokens: o.completionTokens },
    }) +
    namedEvent('message_stop', { type: 'message_stop' })
  );
}

/** Anthropic's error shape. */
export function anthropicError(status: number, message: string): unknown {
  const type = status === 404 ? 'not_found_error' : status === 413 ? 'request_too_large' : status === 503 ? 'overloaded_error' : status >= 500 ? 'api_error' : 'invalid_request_error';
  return { type: 'error', error: { type, message } };
}

/** A Responses answer: `id` first, as engines write it (a router reads it from the first bytes). */
export function responseBody(o: Outcome, status: 'in_progress' | 'completed' | 'incomplete', previousResponseId: string | undefined): Record<string, unknown> {
  return {
    id: o.id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model: o.model,
    status,
    previous_response_id: previousResponseId ?? null,
    output:
      status === 'in_progress'
        ? []
        : [{ type: 'message', id: `msg_${o.id.slice(5)}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: o.text, annotations: [] }] }],
    usage:
      status === 'in_progress'
        ? null
        : { input_tokens: o.promptTokens, input_tokens_details: { cached_tokens: o.cachedTokens }, output_tokens: o.completionTokens, total_tokens: o.promptTokens + o.completionTokens },
  };
}
