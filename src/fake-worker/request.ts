/**
 * An OpenAI-compatible request as the fake worker understands it: the prompt text the engine
 * "tokenizes" (a chat template applied to the messages), how many tokens to generate, and whether
 * to stream. Untrusted input: every problem becomes a 400 with an OpenAI-style message, never a throw.
 */
import { parseJsonBody } from '../request/body.js';

export type Endpoint = 'chat' | 'completions';

export interface CompletionRequest {
  endpoint: Endpoint;
  /** The model named by the request, if any (echoed back, as an engine serving that model would). */
  model: string | undefined;
  /** The text the engine sees: the chat template's rendering, or the completions prompt. */
  prompt: string;
  /** Undefined when the client set no limit (the worker's default applies and ends with `stop`). */
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
}

export type ParsedRequest = { ok: true; value: CompletionRequest } | { ok: false; message: string; param?: string };

/**
 * A minimal chat template in the style of Llama 3's: each message is a role header and its text,
 * and the prompt ends with the assistant header (`add_generation_prompt`). What matters for the
 * prefix cache is that a conversation's next prompt starts with this prompt plus the answer.
 */
export function renderChat(messages: ReadonlyArray<{ role: string; content: string }>, tools?: string): string {
  const parts: string[] = [];
  if (tools !== undefined) parts.push(`<|tools|>\n${tools}\n`);
  for (const m of messages) parts.push(`<|${m.role}|>\n${m.content}\n`);
  parts.push('<|assistant|>\n');
  return parts.join('');
}

/** Text a finished turn leaves in the cache: the prompt and the answer the next turn will quote. */
export function turnText(prompt: string, output: string): string {
  return prompt + output;
}

export function parseCompletionRequest(endpoint: Endpoint, raw: Buffer): ParsedRequest {
  const parsed = parseJsonBody(raw);
  if (!parsed.ok) {
    const why = { empty: 'the request body is empty', not_utf8: 'the request body is not UTF-8', not_json: 'the request body is not valid JSON', not_object: 'the request body must be a JSON object', too_complex: 'the request body is nested too deeply' }[parsed.reason];
    return { ok: false, message: why };
  }
  const body = parsed.value;
  const model = body['model'];
  if (model !== undefined && typeof model !== 'string') return { ok: false, message: '`model` must be a string', param: 'model' };

  let prompt: string;
  if (endpoint === 'chat') {
    const rendered = chatPrompt(body);
    if (!rendered.ok) return rendered;
    prompt = rendered.prompt;
  } else {
    const p = body['prompt'];
    if (typeof p === 'string') prompt = p;
    else if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') prompt = p[0];
    else if (Array.isArray(p) && p.length > 1) return { ok: false, message: 'the fake worker serves one prompt per request', param: 'prompt' };
    else return { ok: false, message: '`prompt` must be a string', param: 'prompt' };
  }

  const limit = body['max_completion_tokens'] ?? body['max_tokens'];
  if (limit !== undefined && limit !== null && !(typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1)) {
    return { ok: false, message: '`max_tokens` must be a positive integer', param: 'max_tokens' };
  }
  const n = body['n'];
  if (n !== undefined && n !== null && n !== 1) return { ok: false, message: 'the fake worker generates one choice (`n` must be 1)', param: 'n' };
  const stream = body['stream'];
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') return { ok: false, message: '`stream` must be a boolean', param: 'stream' };
  const options = body['stream_options'];
  const includeUsage = options !== null && typeof options === 'object' && (options as Record<string, unknown>)['include_usage'] === true;

  return {
    ok: true,
    value: {
      endpoint,
      model: model as string | undefined,
      prompt,
      maxTokens: typeof limit === 'number' ? limit : undefined,
      stream: stream === true,
      includeUsage,
    },
  };
}

function chatPrompt(body: Record<string, unknown>): { ok: true; prompt: string } | { ok: false; message: string; param: string } {
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0) return { ok: false, message: '`messages` must be a non-empty array', param: 'messages' };
  const flat: Array<{ role: string; content: string }> = [];
  for (const [i, m] of messages.entries()) {
    if (m === null || typeof m !== 'object' || Array.isArray(m)) return { ok: false, message: `messages[${i}] must be an object`, param: 'messages' };
    const msg = m as Record<string, unknown>;
    if (typeof msg['role'] !== 'string' || msg['role'] === '') return { ok: false, message: `messages[${i}].role must be a non-empty string`, param: 'messages' };
    const content = contentText(msg['content']);
    if (content === undefined) return { ok: false, message: `messages[${i}].content must be a string or an array of content parts`, param: 'messages' };
    flat.push({ role: msg['role'], content });
  }
  const tools = Array.isArray(body['tools']) && body['tools'].length > 0 ? JSON.stringify(body['tools']) : undefined;
  return { ok: true, prompt: renderChat(flat, tools) };
}

/** A message's text: a string, or the text of its parts (other parts by their JSON), or nothing. */
function contentText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) return undefined;
  return content
    .map((part) => {
      if (typeof part === 'string') return part;
      if (part !== null && typeof part === 'object' && typeof (part as Record<string, unknown>)['text'] === 'string') return (part as Record<string, string>)['text'];
      return JSON.stringify(part) ?? '';
    })
    .join('');
}
