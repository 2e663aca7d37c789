// Body parsing the way FastAPI does it: a JSON body (or one without a content type) is parsed
// as JSON, an empty body is "absent", and malformed JSON is not an error here but a marker the
// validator reports as `json_invalid` with Python's character offset. Any other content type
// reaches validation as text (→ model_attributes_type), as FastAPI passes it to pydantic.
// A body nested deeper than MAX_JSON_DEPTH (512) levels, well-formed or not, is 400 "There was
// an error parsing the body", as FastAPI answers one deeper than Python's recursion limit:
// nothing deeper reaches the validator, the database or a serialiser.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { HttpError } from './http-error.js';
import { MalformedJson } from '../validation/pydantic.js';
import { JsonTooDeep, pythonJsonFailure, tooDeep } from '../validation/python-json.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });
// ignoreBOM: a byte order mark is taken off before (decode), and one more is text, as in Python.
const utf16le = new TextDecoder('utf-16le', { fatal: true, ignoreBOM: true });
const utf16be = new TextDecoder('utf-16be', { fatal: true, ignoreBOM: true });
const unparseable = (): HttpError => new HttpError(400, 'There was an error parsing the body');

/** UTF-32 (TextDecoder has none): whole 4-byte units, each a code point and no surrogate, as Python's codec reads it. */
function decodeUtf32(buf: Buffer, littleEndian: boolean): string {
  if (buf.length % 4 !== 0) throw new RangeError('truncated data');
  let text = '';
  for (let i = 0; i < buf.length; i += 4) {
    const c = littleEndian ? buf.readUInt32LE(i) : buf.readUInt32BE(i);
    if (c >= 0xd800 && c <= 0xdfff) throw new RangeError('code point in surrogate code point range');
    text += String.fromCodePoint(c);
  }
  return text;
}

/**
 * The body's text as Python's json.loads reads bytes (json.detect_encoding): UTF-32 or UTF-16 by
 * their byte order mark or, without one, by where the first bytes are zero (JSON begins with
 * ASCII); else UTF-8, its BOM skipped. A body its encoding cannot decode is 400, as FastAPI
 * answers it.
 */
function decode(b: Buffer): string {
  try {
    if (b.length >= 4 && b[0] === 0 && b[1] === 0 && b[2] === 0xfe && b[3] === 0xff) return decodeUtf32(b.subarray(4), false);
    if (b.length >= 4 && b[0] === 0xff && b[1] === 0xfe && b[2] === 0 && b[3] === 0) return decodeUtf32(b.subarray(4), true);
    if (b.length >= 2 && b[0] === 0xfe && b[1] === 0xff) return utf16be.decode(b.subarray(2));
    if (b.length >= 2 && b[0] === 0xff && b[1] === 0xfe) return utf16le.decode(b.subarray(2));
    if (b.length >= 4 && !(b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf)) {
      if (b[0] === 0) return b[1] ? utf16be.decode(b) : decodeUtf32(b, false);
      if (b[1] === 0) return b[2] || b[3] ? utf16le.decode(b) : decodeUtf32(b, true);
    } else if (b.length === 2) {
      if (b[0] === 0) return utf16be.decode(b);
      if (b[1] === 0) return utf16le.decode(b);
    }
    return utf8.decode(b);
  } catch {
    throw unparseable();
  }
}

export function parseJsonBody(text: string): unknown {
  if (text.length === 0) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // JSON.parse and Python disagree only on NaN/Infinity, which Python accepts; the scanner
    // then finds nothing and we still report where the value could not be read.
    try {
      return new MalformedJson(pythonJsonFailure(text) ?? { pos: 0, msg: 'Expecting value' });
    } catch (err) {
      if (err instanceof JsonTooDeep) throw unparseable();
      throw err;
    }
  }
  if (tooDeep(text, value)) throw unparseable();
  return value;
}

function isJsonType(contentType: string | undefined): boolean {
  if (!contentType) return true;
  const media = contentType.split(';')[0]!.trim().toLowerCase();
  return media === 'application/json' || (media.startsWith('application/') && media.endsWith('+json'));
}

/**
 * A query string as Starlette reads it (Python's parse_qsl with keep_blank_values): `+` is a
 * space, blank values are kept, a %-escape that is not UTF-8 (`%ff`, `%e9`) becomes U+FFFD and
 * a malformed one (`%zz`) stays as written — the WHATWG rules URLSearchParams follows, which
 * agree with Python's on each. A repeated name gives its values in order (routes read the last,
 * as FastAPI does). Without a prototype: `__proto__` is a name like any other.
 */
export function parseQuery(query: string): Record<string, string | string[]> {
  const out = Object.create(null) as Record<string, string | string[]>;
  for (const [k, v] of new URLSearchParams(query)) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

/** A media type as RFC 9110 writes it (`type/subtype`, parameters after `;`), as Fastify checks it. */
const MEDIA_TYPE = /^\s*[\w!#$%&'*+.^`|~-]+\/[\w!#$%&'*+.^`|~-]+\s*(;|$)/;

export function registerContentParsers(app: FastifyInstance): void {
  // A Content-Type that is no media type at all (`garbage`): Fastify would answer 415 before any
  // parser runs; Python's email parser, which FastAPI reads it with, takes it for text/plain, and
  // the body then reaches validation as text (422 model_attributes_type), as other text does.
  // An empty one (`Content-Type:`) is no content type at all: JSON, as FastAPI reads a body without one.
  app.addHook('onRequest', (req, _reply, done) => {
    const type = req.headers['content-type'];
    if (type !== undefined) {
      if (type.trim() === '') delete req.headers['content-type'];
      else if (!MEDIA_TYPE.test(type)) req.headers['content-type'] = 'text/plain';
    }
    done();
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (req: FastifyRequest, body: Buffer, done) => {
    try {
      const text = decode(body);
      // Bytes that decode to nothing (a byte order mark alone) are a body json.loads fails on, not an absent one.
      const json = (): unknown =>
        text.length === 0 && body.length > 0 ? new MalformedJson({ pos: 0, msg: 'Expecting value' }) : parseJsonBody(text);
      done(null, isJsonType(req.headers['content-type']) ? json() : text.length === 0 ? undefined : text);
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}
