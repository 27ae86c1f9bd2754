/**
 * OpenAI-compatible response bodies, as vLLM's server writes them: whole completions, stream
 * chunks (Server-Sent Events), usage with `prompt_tokens_details.cached_tokens` (the prefix-cache
 * hit, which is how a client or the demo sees the cache at work), and error bodies.
 */
import { randomBytes } from 'node:crypto';
import type { Endpoint } from './request.js';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

export function completionId(endpoint: Endpoint): string {
  return `${endpoint === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`;
}

export type FinishReason = 'stop' | 'length';

interface Meta {
  id: string;
  created: number;
  model: string;
}

export function completionBody(endpoint: Endpoint, meta: Meta, text: string, finish: FinishReason, u: Usage): unknown {
  if (endpoint === 'chat') {
    return {
      ...meta,
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }],
      usage: u,
    };
  }
  return { ...meta, object: 'text_completion', choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], usage: u };
}

/** One stream chunk; `delta` is the new text (the chat stream's first chunk also names the role). */
export function chunkBody(endpoint: Endpoint, meta: Meta, delta: { role?: 'assistant'; content: string } | undefined, finish: FinishReason | null): unknown {
  if (endpoint === 'chat') {
    return {
      ...meta,
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: delta ?? {}, logprobs: null, finish_reason: finish }],
    };
  }
  return { ...meta, object: 'text_completion', choices: [{ index: 0, text: delta?.content ?? '', logprobs: null, finish_reason: finish }] };
}

/** The final usage chunk sent when the client asked for `stream_options.include_usage`. */
export function usageChunk(endpoint: Endpoint, meta: Meta, u: Usage): unknown {
  return { ...meta, object: endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion', choices: [], usage: u };
}

export function sse(data: unknown): string {
  return `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
}

export function errorBody(status: number, message: string, param?: string): unknown {
  const type = status === 404 ? 'NotFoundError' : status === 503 ? 'ServiceUnavailableError' : status >= 500 ? 'InternalServerError' : 'BadRequestError';
  return { error: { message, type, param: param ?? null, code: status } };
}
