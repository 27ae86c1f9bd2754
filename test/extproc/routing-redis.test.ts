import { startRedis, type TestRedis } from '../helpers/redis-server.js';
import { routingScenarios } from './routing.scenarios.js';

// One redis-server for the file; each gate gets its own logical database, so gates never share state.
let redis: TestRedis | undefined;
let db = 0;
routingScenarios({
  name: 'redis',
  store: async () => {
    redis ??= await startRedis();
    return `${redis.url}/${++db}`;
  },
  cleanup: async () => redis?.stop(),
});
