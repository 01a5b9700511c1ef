/**
 * What the adapter's settings ask of its transport and identity, loaded and checked before it
 * listens: the TLS files (tls-files.ts) and the JWT key set (jwt.ts). The CLI loads it first,
 * so that a file that cannot be used is one line and exit 2.
 */
import type { TlsOptions } from '../protocol/http-server.js';
import { checkProvable } from './credentials.js';
import { JwtVerifier } from './jwt.js';
import type { AdapterSettings } from './settings.js';
import { loadTls } from './tls-files.js';
import type { Topology } from './topology.js';

export interface Security {
  readonly tls?: TlsOptions;
  readonly jwt?: JwtVerifier;
}

/** Loads TLS and the JWKS; throws a SettingsError (TopologyError) naming what is wrong. */
export function loadSecurity(
  settings: AdapterSettings,
  topology: Topology,
  now: () => number = Date.now,
): Security {
  const tls =
    settings.tlsCert === undefined || settings.tlsKey === undefined
      ? undefined
      : loadTls({
          cert: settings.tlsCert,
          key: settings.tlsKey,
          ...(settings.tlsClientCa === undefined ? {} : { clientCa: settings.tlsClientCa }),
        });
  const jwt =
    settings.jwtJwks === undefined
      ? undefined
      : new JwtVerifier(
          {
            jwks: settings.jwtJwks,
            issuer: settings.jwtIssuer!,
            audience: settings.jwtAudience,
          },
          now,
        );
  checkProvable(topology, jwt !== undefined, tls?.ca !== undefined);
  return { ...(tls === undefined ? {} : { tls }), ...(jwt === undefined ? {} : { jwt }) };
}
