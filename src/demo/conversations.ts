/**
 * The demo's clients: multi-turn chat sessions, each opening with one of a few long shared system
 * prompts (as many users of one app do) and adding a user message per turn, with the model's
 * previous answers quoted back as a chat client does. Text is deterministic pseudo-text
 * (src/sim/pseudo-text.ts), so every run sends the same prompts.
 */
import { pseudoText } from '../sim/pseudo-text.js';

/** ~1,500 tokens: a typical app's system prompt with instructions and a few examples. */
const SYSTEM_PROMPT_CHARS = 6000;
/** ~100-200 tokens per user turn. */
const USER_TURN_CHARS = [400, 800] as const;
/** Tokens the model writes per turn: short, so turns are quick to watch. */
export const ANSWER_TOKENS = 64;

/** Three apps, one system prompt each: a three-worker fleet has a prompt to hold per worker. */
export const SYSTEM_PROMPT_NAMES = ['A', 'B', 'C'] as const;

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface Turn {
  body: Buffer;
  user: ChatMessage;
}

export class DemoSession {
  readonly messages: ChatMessage[];
  /** Turns answered so far. */
  turns = 0;
  /** The worker that served each answered turn, in order. */
  readonly workers: string[] = [];
  cachedTokens = 0;
  promptTokens = 0;

  constructor(
    readonly id: string,
    readonly systemPrompt: string,
    private readonly index: number,
  ) {
    this.messages = [{ role: 'system', content: pseudoText(`system-${systemPrompt}`, SYSTEM_PROMPT_CHARS) }];
  }

  /** The next turn's request: the conversation so far plus a new user message. */
  nextTurn(model: string): Turn {
    const [lo, hi] = USER_TURN_CHARS;
    const chars = lo + (((this.index + 1) * 7919 + this.turns * 104729) % (hi - lo));
    const user: ChatMessage = { role: 'user', content: pseudoText(`${this.id}-turn-${this.turns}`, chars) };
    const body = JSON.stringify({ model, messages: [...this.messages, user], max_tokens: ANSWER_TOKENS, stream: true, stream_options: { include_usage: true } });
    return { body: Buffer.from(body), user };
  }

  /** Records an answered turn: its user message and the answer join the conversation. */
  answered(turn: Turn, answer: string, worker: string, promptTokens: number, cachedTokens: number): void {
    this.messages.push(turn.user, { role: 'assistant', content: answer });
    this.turns++;
    this.workers.push(worker);
    this.promptTokens += promptTokens;
    this.cachedTokens += cachedTokens;
  }
}

/** `count` sessions, alternating between the shared system prompts. */
export function demoSessions(count: number): DemoSession[] {
  const width = String(count).length;
  return Array.from({ length: count }, (_, i) => new DemoSession(`s${String(i + 1).padStart(Math.max(2, width), '0')}`, SYSTEM_PROMPT_NAMES[i % SYSTEM_PROMPT_NAMES.length]!, i));
}
