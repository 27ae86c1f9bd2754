import { routingScenarios } from './routing.scenarios.js';

routingScenarios({ name: 'memory', store: async () => 'memory', cleanup: async () => {} });
