/**
 * `agent-gateway migrate-store` refuses: the source file is held by another process or is not an
 * adapter's store of this version, or the database already holds messages. One line, exit 2
 * (cli/migrate-store.ts); nothing was copied.
 */
export class CopyRefusal extends Error {}
