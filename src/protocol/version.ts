/** The package's version (package.json), as both programs report it (MCP, OpenAPI). */
import { createRequire } from 'node:module';

export const VERSION = (createRequire(import.meta.url)('../../package.json') as { version: string })
  .version;
