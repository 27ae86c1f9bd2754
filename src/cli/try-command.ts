import type { Command } from 'commander';
export function registerTryCommand(_program: Command): void {}
