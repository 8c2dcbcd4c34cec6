import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RunTranslator, messageText, resultText, translateEvent } from '../src/translate.mjs';

test("the seed's event table", () => {
  assert.deepEqual(translateEvent({ type: 'token', content: 'Hi' }), { type: 'text_chunk', content: 'Hi' });
  assert.deepEqual(translateEvent({ type: 'tool_use', name: 'ls', input: { path: '.' }, id: 'c1' }), {
    type: 'tool_call_start',
    tool_name: 'ls',
    tool_input: { path: '.' },
    call_id: 'c1',
  });
  assert.deepEqual(translateEvent({ type: 'tool_result', name: 'ls', output: 'a.txt', id: 'c1', isError: false }), {
    type: 'tool_call_complete',
    tool_name: 'ls',
    result: 'a.txt',
    call_id: 'c1',
    is_error: false,
  });
  assert.deepEqual(translateEvent({ type: 'skill_invoke', skill: 'pdf', args: { f: 1 } }), {
    type: 'skill_call_start',
    skill_name: 'pdf',
    arguments: { f: 1 },
  });
  assert.deepEqual(translateEvent({ type: 'skill_result', skill: 'pdf', output: 'ok' }), {
    type: 'skill_call_complete',
    skill_name: 'pdf',
    result: 'ok',
  });
  assert.deepEqual(translateEvent({ type: 'thinking', content: 'hmm' }), { type: 'thinking', content: 'hmm', stage: 'openclaw' });
  assert.deepEqual(translateEvent({ type: 'done', response: 'All done' }), { type: 'execution_complete', content: 'All done' });
  assert.deepEqual(translateEvent({ type: 'done', response: 'Al', cancelled: true }), {
    type: 'execution_complete',
    content: 'Al',
    cancelled: true,
  });
  assert.deepEqual(translateEvent({ type: 'error', message: 'boom' }), { type: 'execution_error', error: 'boom' });
  assert.equal(translateEvent({ type: 'lifecycle' }), null);
  assert.equal(translateEvent(undefined), null);
});

const message = (text) => ({ role: 'assistant', content: [{ type: 'text', text }] });

test('chat deltas become text_chunks with only the new text; other runs are ignored', () => {
  const run = new RunTranslator('r1');
  const out = [
    ...run.chat({ runId: 'r1', state: 'status', phase: 'starting_model' }),
    ...run.chat({ runId: 'r1', state: 'delta', message: message('Hel'), deltaText: 'Hel' }),
    ...run.chat({ runId: 'other', state: 'delta', message: message('x'), deltaText: 'x' }),
    ...run.chat({ runId: 'r1', state: 'delta', message: message('Hello'), deltaText: 'lo' }),
    ...run.chat({ runId: 'r1', state: 'final', message: message('Hello!'), stopReason: 'stop', usage: { input: 3, output: 2 } }),
    ...run.chat({ runId: 'r1', state: 'delta', message: message('late'), deltaText: 'late' }),
  ].map(translateEvent);
  assert.deepEqual(out, [
    { type: 'text_chunk', content: 'Hel' },
    { type: 'text_chunk', content: 'lo' },
    { type: 'text_chunk', content: '!' }, // the final had text no delta carried
    { type: 'execution_complete', content: 'Hello!' },
  ]);
  assert.deepEqual(run.usage, { input: 3, output: 2 });
});

test('a v3 server (cumulative message, no deltaText) and replace: true', () => {
  const v3 = new RunTranslator('r');
  const chunks = [
    ...v3.chat({ runId: 'r', state: 'delta', message: message('Hi') }),
    ...v3.chat({ runId: 'r', state: 'delta', message: message('Hi there') }),
  ];
  assert.deepEqual(chunks.map((e) => e.content), ['Hi', ' there']);
  const replaced = new RunTranslator('r');
  const events = [
    ...replaced.chat({ runId: 'r', state: 'delta', deltaText: 'Draft' }),
    ...replaced.chat({ runId: 'r', state: 'delta', deltaText: 'Draft, longer', replace: true }),
    ...replaced.chat({ runId: 'r', state: 'delta', deltaText: 'Rewritten', replace: true }),
    ...replaced.chat({ runId: 'r', state: 'final', message: message('Rewritten') }),
  ];
  assert.deepEqual(events.map(translateEvent), [
    { type: 'text_chunk', content: 'Draft' },
    { type: 'text_chunk', content: ', longer' },
    { type: 'execution_complete', content: 'Rewritten' }, // text already sent cannot be taken back
  ]);
});

test('agent tool and thinking events; aborted and error end the run', () => {
  const run = new RunTranslator('r');
  const events = [
    ...run.agent({ runId: 'r', stream: 'lifecycle', data: { phase: 'start' } }),
    ...run.agent({ runId: 'r', stream: 'usage', data: { outputTokens: 6 } }),
    ...run.agent({ runId: 'r', stream: 'thinking', data: { text: 'Let', delta: 'Let' } }),
    ...run.agent({ runId: 'r', stream: 'thinking', data: { text: 'Let me' } }),
    ...run.agent({ runId: 'r', stream: 'tool', data: { phase: 'start', name: 'exec', toolCallId: 't1', args: { command: 'echo hi' } } }),
    ...run.agent({ runId: 'r', stream: 'tool', data: { phase: 'update', name: 'exec', toolCallId: 't1' } }),
    ...run.agent({ runId: 'x', stream: 'tool', data: { phase: 'start', name: 'other', toolCallId: 't9' } }),
    ...run.agent({ runId: 'r', stream: 'tool', data: { phase: 'result', toolCallId: 't1', isError: true, result: { content: [{ type: 'text', text: 'hi\n' }] } } }),
    ...run.chat({ runId: 'r', state: 'delta', deltaText: 'Part' }),
    ...run.chat({ runId: 'r', state: 'aborted', stopReason: 'rpc', message: message('Part') }),
  ].map(translateEvent);
  assert.deepEqual(events, [
    { type: 'thinking', content: 'Let', stage: 'openclaw' },
    { type: 'thinking', content: ' me', stage: 'openclaw' },
    { type: 'tool_call_start', tool_name: 'exec', tool_input: { command: 'echo hi' }, call_id: 't1' },
    { type: 'tool_call_complete', tool_name: 'exec', result: 'hi\n', call_id: 't1', is_error: true },
    { type: 'text_chunk', content: 'Part' },
    { type: 'execution_complete', content: 'Part', cancelled: true },
  ]);
  assert.equal(run.outputTokens, 6);
  const failed = new RunTranslator('f');
  assert.deepEqual(failed.chat({ runId: 'f', state: 'error', errorMessage: 'rate limited', errorKind: 'rate_limit' }).map(translateEvent), [
    { type: 'execution_error', error: 'rate limited' },
  ]);
  assert.deepEqual(new RunTranslator('g').chat({ runId: 'g', state: 'error' }).map(translateEvent), [
    { type: 'execution_error', error: 'the OpenClaw run failed' },
  ]);
});

test('message and result text shapes', () => {
  assert.equal(messageText({ content: [{ type: 'text', text: 'a' }, { type: 'image' }, { type: 'text', text: 'b' }] }), 'ab');
  assert.equal(messageText({ content: 'plain' }), 'plain');
  assert.equal(messageText(null), '');
  assert.equal(resultText('str'), 'str');
  assert.equal(resultText({ content: [{ type: 'text', text: 'out' }], details: {} }), 'out');
  assert.equal(resultText({ exitCode: 0 }), '{"exitCode":0}');
  assert.equal(resultText(undefined), '');
});
