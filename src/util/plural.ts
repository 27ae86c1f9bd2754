/** "1 worker", "3 workers": a count and its noun for the CLI's and the demo's text (English nouns taking an s). */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
