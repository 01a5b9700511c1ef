/**
 * PEM certificates as both programs check them before they use a CA or certificate file: every
 * `CERTIFICATE` block parsed (node:crypto X509Certificate), so that a truncated block, a file of
 * keys or one of nothing is refused with a sentence naming what is wrong, rather than taken by
 * createSecureContext, which accepts such a CA file silently and then verifies no client.
 */
import { X509Certificate } from 'node:crypto';

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The certificates of `text`, in order; throws an Error whose message says what is wrong. */
export function pemCertificates(text: string): X509Certificate[] {
  const blocks = text.match(CERT_BLOCK);
  if (blocks === null) throw new Error('holds no PEM certificate (-----BEGIN CERTIFICATE-----)');
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new Error(`its certificate ${i + 1} cannot be parsed (${(err as Error).message})`);
    }
  });
}
