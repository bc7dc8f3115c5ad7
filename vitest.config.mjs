// Unit tests of the labextension's pure TypeScript (layout, tags, error placement,
// formatting): `npm run test:unit`, run by `make jstest`.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['labextension/test/**/*.test.ts'],
    environment: 'node'
  }
});
