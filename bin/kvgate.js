#!/usr/bin/env node
// Runs the TypeScript sources through tsx's loader, so the installed CLI and the tests run the
// same code with no separate build step.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
