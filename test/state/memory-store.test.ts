import { MemoryStore } from '../../src/state/memory-store.js';
import { storeContract } from './store.contract.js';

storeContract('memory', async () => {
  const store = new MemoryStore();
  return { store, cleanup: () => store.close() };
});
