// POST /worker/update_result through the real app, on each storage backend.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setNodeDisabled, rotateNodeKey } from '../src/nodes/lifecycle.js';
import { setModelPoints } from '../src/repositories/models.js';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';
import { snapshot, totalPoints } from './helpers/state.js';

describe.each(backends)('POST /worker/update_result on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let alpha: string;
  let beta: string;
  const post = (payload: unknown, headers: Record<string, string> = {}) =>
    t.app.inject({ method: 'POST', url: '/worker/update_result', payload: payload as object, headers });

  beforeAll(async () => {
    t = await startApp(backend);
    alpha = await t.addNode('alpha');
    beta = await t.addNode('beta');
  });
  afterAll(async () => t.close());

  describe('happy', () => {
    it('records a new success and credits the default point', async () => {
      const r = report(alpha);
      const res = await post(r);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ job_id: r.job_id, status: 'success', points: 1, replayed: false });
    });

    it('records an error with no points', async () => {
      const r = report(alpha, { status: 'error', result: { message: 'CUDA out of memory' } });
      expect((await post(r)).json()).toEqual({ job_id: r.job_id, status: 'error', points: 0, replayed: false });
    });

    it('replays the same final report without crediting again', async () => {
      const r = report(alpha, { result: { message: { role: 'assistant', content: 'hi' } } });
      await post(r);
      const before = await totalPoints(t.db);
      const again = await post({ ...r, result: { message: { content: 'hi', role: 'assistant' } } });
      expect(again.statusCode).toBe(200);
      expect(again.json()).toEqual({ job_id: r.job_id, status: 'success', points: 0, replayed: true });
      expect(await totalPoints(t.db)).toBe(before);
    });

    it('upgrades an error to a success once, then replays', async () => {
      const r = report(alpha, { status: 'error' });
      await post(r);
      const before = await totalPoints(t.db);
      const up = await post({ ...r, status: 'success', result: { message: 'ok now' } });
      expect(up.json()).toEqual({ job_id: r.job_id, status: 'success', points: 1, replayed: false });
      const again = await post({ ...r, status: 'success', result: { message: 'ok now' } });
      expect(again.json()).toMatchObject({ replayed: true, points: 0 });
      expect(await totalPoints(t.db)).toBe(before + 1);
    });

    it('treats a repeated error as a replay and keeps the first one', async () => {
      const r = report(alpha, { status: 'error', result: { message: 'first' } });
      await post(r);
      const res = await post({ ...r, result: { message: 'second' } });
      expect(res.json()).toEqual({ job_id: r.job_id, status: 'error', points: 0, replayed: true });
    });

    it("credits the model's points_per_job in force at the time of the report", async () => {
      await setModelPoints(t.db, 'mixtral:8x7b', 2.5);
      const first = await post(report(alpha, { model_name: 'mixtral:8x7b' }));
      expect(first.json().points).toBe(2.5);
      await setModelPoints(t.db, 'mixtral:8x7b', 4);
      const second = await post(report(alpha, { model_name: 'mixtral:8x7b' }));
      expect(second.json().points).toBe(4);
      await setModelPoints(t.db, 'mixtral:8x7b', null);
      expect((await post(report(alpha, { model_name: 'mixtral:8x7b' }))).json().points).toBe(1);
    });

    it('ignores extra fields and an Authorization header', async () => {
      const res = await post({ ...report(alpha), worker_version: '1.2' }, { authorization: 'Bearer something-else' });
      expect(res.statusCode).toBe(200);
    });
  });

  describe('errors', () => {
    it('409 when a success is followed by an error, and nothing changes', async () => {
      const r = report(alpha);
      await post(r);
      const before = await snapshot(t.db);
      const res = await post({ ...r, status: 'error' });
      expect(res.statusCode).toBe(409);
      expect(typeof res.json().detail).toBe('string');
      expect(await snapshot(t.db)).toEqual(before);
    });

    it('409 when a success is re-sent with a different result', async () => {
      const r = report(alpha);
      await post(r);
      expect((await post({ ...r, result: { message: 'other' } })).statusCode).toBe(409);
    });

    it('409 when another node reports a recorded job_id, even as an error', async () => {
      const r = report(alpha, { status: 'error' });
      await post(r);
      const before = await snapshot(t.db);
      expect((await post({ ...r, api_key: beta })).statusCode).toBe(409);
      expect((await post({ ...r, api_key: beta, status: 'success' })).statusCode).toBe(409);
      expect(await snapshot(t.db)).toEqual(before);
    });

    it('409 when the model differs from the recorded one', async () => {
      const r = report(alpha, { status: 'error' });
      await post(r);
      const res = await post({ ...r, status: 'success', model_name: 'other-model' });
      expect(res.statusCode).toBe(409);
      expect(res.json().detail).toMatch(/model/);
    });

    it('422 with every problem at once and nothing recorded', async () => {
      const before = await snapshot(t.db);
      const res = await post({ job_id: 5, api_key: alpha, result: 'x', status: 'done' });
      expect(res.statusCode).toBe(422);
      expect(res.json().detail.map((e: { loc: unknown[] }) => e.loc)).toEqual([
        ['body', 'job_id'],
        ['body', 'model_name'],
        ['body', 'result'],
        ['body', 'status'],
      ]);
      expect(await snapshot(t.db)).toEqual(before);
    });

    it('422 json_invalid with the character offset for malformed JSON', async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: '{"job_id": "a",}',
        headers: { 'content-type': 'application/json' },
      });
      expect(res.statusCode).toBe(422);
      expect(res.json()).toEqual({
        detail: [
          {
            type: 'json_invalid',
            loc: ['body', 15],
            msg: 'JSON decode error',
            input: {},
            ctx: { error: 'Expecting property name enclosed in double quotes' },
          },
        ],
      });
    });

    it('422 missing for an empty body, with or without a content type', async () => {
      for (const headers of [{}, { 'content-type': 'application/json' }]) {
        const res = await t.app.inject({ method: 'POST', url: '/worker/update_result', headers });
        expect(res.statusCode).toBe(422);
        expect(res.json()).toEqual({ detail: [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }] });
      }
    });

    it('422 model_attributes_type for a JSON array or a non-JSON content type', async () => {
      const arr = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: '[1]',
        headers: { 'content-type': 'application/json' },
      });
      expect(arr.json().detail[0]).toMatchObject({ type: 'model_attributes_type', loc: ['body'], input: [1] });
      const text = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: 'job_id=1',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      expect(text.statusCode).toBe(422);
      expect(text.json().detail[0]).toMatchObject({ type: 'model_attributes_type', loc: ['body'] });
    });

    it('parses a JSON body sent without a content type, as FastAPI does', async () => {
      const r = report(alpha);
      const res = await t.app.inject({ method: 'POST', url: '/worker/update_result', payload: Buffer.from(JSON.stringify(r)) });
      expect(res.statusCode).toBe(200);
    });

    it("reads a body in UTF-16 or UTF-32, with or without a byte order mark, as Python's json.loads does; a truncated one is 400", async () => {
      const json = JSON.stringify(report(alpha, { job_id: 'utf16-\u00e9-\u{1f600}' }));
      const utf16be = (s: string) => Buffer.from(s, 'utf16le').swap16();
      const utf32 = (s: string, le: boolean) =>
        Buffer.concat(
          [...s].map((c) => {
            const b = Buffer.alloc(4);
            if (le) b.writeUInt32LE(c.codePointAt(0)!);
            else b.writeUInt32BE(c.codePointAt(0)!);
            return b;
          }),
        );
      const bodies: [string, Buffer][] = [
        ['utf-8 with its BOM', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json)])],
        ['utf-16le with its BOM', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(json, 'utf16le')])],
        ['utf-16be with its BOM', Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be(json)])],
        ['utf-16le', Buffer.from(json, 'utf16le')],
        ['utf-16be', utf16be(json)],
        ['utf-32le with its BOM', Buffer.concat([Buffer.from([0xff, 0xfe, 0, 0]), utf32(json, true)])],
        ['utf-32be', utf32(json, false)],
      ];
      for (const [name, payload] of bodies) {
        const res = await t.app.inject({ method: 'POST', url: '/worker/update_result', payload, headers: { 'content-type': 'application/json' } });
        expect(res.statusCode, name).toBe(200);
        expect(res.json().job_id, name).toBe('utf16-\u00e9-\u{1f600}');
      }
      // Half a UTF-16 unit at the end, or a surrogate in UTF-32: the decoder fails, as Python's does.
      const truncated = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: Buffer.concat([Buffer.from(json, 'utf16le'), Buffer.from([0x7d])]),
        headers: { 'content-type': 'application/json' },
      });
      expect(truncated.statusCode).toBe(400);
      const surrogate = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: Buffer.concat([utf32('{"a": "', false), Buffer.from([0, 0, 0xd8, 0]), utf32('"}', false)]),
        headers: { 'content-type': 'application/json' },
      });
      expect(surrogate.statusCode).toBe(400);
      // A second byte order mark is text, as in Python, whose json.loads then finds no JSON at 0.
      const twice = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: Buffer.concat([Buffer.from([0xff, 0xfe, 0xff, 0xfe]), Buffer.from(json, 'utf16le')]),
        headers: { 'content-type': 'application/json' },
      });
      expect(twice.statusCode).toBe(422);
      expect(twice.json().detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', 0] });
      // A byte order mark alone is a body, of no JSON (json.loads: "Expecting value" at 0), not an absent one.
      for (const bom of [
        [0xef, 0xbb, 0xbf],
        [0xff, 0xfe],
        [0xfe, 0xff],
      ]) {
        const alone = await t.app.inject({
          method: 'POST',
          url: '/worker/update_result',
          payload: Buffer.from(bom),
          headers: { 'content-type': 'application/json' },
        });
        expect(alone.statusCode, String(bom)).toBe(422);
        expect(alone.json().detail, String(bom)).toEqual([
          { type: 'json_invalid', loc: ['body', 0], msg: 'JSON decode error', input: {}, ctx: { error: 'Expecting value' } },
        ]);
      }
    });

    it('400 for a body that is not UTF-8', async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]),
        headers: { 'content-type': 'application/json' },
      });
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ detail: 'There was an error parsing the body' });
    });
  });

  describe('security', () => {
    it('401 for an unknown key, recording nothing', async () => {
      const before = await snapshot(t.db);
      for (const key of ['nk_not-a-real-key', 'rk_nope', '', 'garbage', alpha.slice(0, -1)]) {
        const res = await post(report(key));
        expect(res.statusCode).toBe(401);
        expect(res.json()).toEqual({ detail: 'Invalid API key' });
      }
      expect(await snapshot(t.db)).toEqual(before);
    });

    it('403 for a reader key: readers cannot report', async () => {
      const reader = await t.addReader();
      const res = await post(report(reader));
      expect(res.statusCode).toBe(403);
    });

    it("403 for a disabled node's key until it is enabled again", async () => {
      const key = await t.addNode('gamma');
      await setNodeDisabled(t.db, 'gamma', true);
      const before = await snapshot(t.db);
      const res = await post(report(key));
      expect(res.statusCode).toBe(403);
      expect(res.json()).toEqual({ detail: 'Node is disabled' });
      expect(await snapshot(t.db)).toEqual(before);
      await setNodeDisabled(t.db, 'gamma', false);
      expect((await post(report(key))).statusCode).toBe(200);
    });

    it('rotating a key invalidates the old one at once', async () => {
      const old = await t.addNode('delta');
      const fresh = await rotateNodeKey(t.db, 'delta');
      expect((await post(report(old))).statusCode).toBe(401);
      expect((await post(report(fresh!.key))).statusCode).toBe(200);
    });

    it('413 for a body over the limit, recording nothing', async () => {
      const before = await snapshot(t.db);
      const res = await post(report(alpha, { result: { message: 'x'.repeat(1024 * 1024 + 10) } }));
      expect(res.statusCode).toBe(413);
      expect(res.json()).toEqual({ detail: 'Request body is too large' });
      expect(await snapshot(t.db)).toEqual(before);
    });
  });

  describe('concurrency', () => {
    it('credits exactly once when the same report arrives many times at once', async () => {
      const r = report(alpha, { model_name: 'race-model' });
      const before = await totalPoints(t.db);
      const replies = await Promise.all(Array.from({ length: 40 }, () => post(r)));
      expect(replies.map((x) => x.statusCode)).toEqual(Array(40).fill(200));
      expect(replies.filter((x) => x.json().replayed === false)).toHaveLength(1);
      expect(replies.reduce((s, x) => s + (x.json().points as number), 0)).toBe(1);
      expect(await totalPoints(t.db)).toBe(before + 1);
    });

    it('credits an error→success upgrade once under concurrent successes', async () => {
      const r = report(alpha, { status: 'error' });
      await post(r);
      const before = await totalPoints(t.db);
      const replies = await Promise.all(Array.from({ length: 20 }, () => post({ ...r, status: 'success' })));
      expect(replies.every((x) => x.statusCode === 200)).toBe(true);
      expect(replies.filter((x) => x.json().points === 1)).toHaveLength(1);
      expect(await totalPoints(t.db)).toBe(before + 1);
    });

    it('lets exactly one of two racing nodes have a job; the other gets 409', async () => {
      for (let i = 0; i < 10; i++) {
        const r = report(alpha);
        const [a, b] = await Promise.all([post(r), post({ ...r, api_key: beta })]);
        expect([a.statusCode, b.statusCode].sort()).toEqual([200, 409]);
      }
    });
  });
});
