import assert from 'node:assert/strict';
import { test } from 'node:test';

import { BRIDGE_TO_PYTHON, LineDecoder, PYTHON_TO_BRIDGE, encodeMessage, parseMessage } from '../src/ipc.mjs';

test('the message types are exactly the seed IPC tables', () => {
  assert.deepEqual([...PYTHON_TO_BRIDGE], ['start', 'user_message', 'cancel', 'stop', 'response']);
  assert.deepEqual([...BRIDGE_TO_PYTHON], ['ready', 'sse_event', 'request', 'fire_and_forget', 'error']);
});

test('lines are split across and within chunks, multi-byte characters included', () => {
  const lines = [];
  const decoder = new LineDecoder((line) => lines.push(line));
  const bytes = Buffer.from('{"a":"你好"}\n{"b":2}\n\n  \n{"c":', 'utf8');
  // split inside the 3-byte character 你
  decoder.push(bytes.subarray(0, 8));
  decoder.push(bytes.subarray(8));
  decoder.push('3}');
  assert.deepEqual(lines, ['{"a":"你好"}', '{"b":2}']);
  decoder.end();
  assert.deepEqual(lines, ['{"a":"你好"}', '{"b":2}', '{"c":3}']);
});

test('an over-long line is dropped whole and the next line still arrives', () => {
  const lines = [];
  const overflows = [];
  const decoder = new LineDecoder((line) => lines.push(line), { maxLineBytes: 10, onOverflow: (n) => overflows.push(n) });
  decoder.push('{"x":"0123456');
  decoder.push('789abcdef"}\n{"ok":1}\n');
  assert.deepEqual(lines, ['{"ok":1}']);
  assert.equal(overflows.length, 1);
});

test('encodeMessage writes one line even for text with newlines and U+2028', () => {
  const line = encodeMessage({ type: 'sse_event', data: { content: 'a\nb\u2028c' } });
  assert.equal(line.indexOf('\n'), line.length - 1);
  assert.deepEqual(JSON.parse(line), { type: 'sse_event', data: { content: 'a\nb\u2028c' } });
});

test('parseMessage accepts known types and explains everything else', () => {
  assert.deepEqual(parseMessage('{"type":"cancel"}'), { message: { type: 'cancel' } });
  assert.match(parseMessage('not json').error, /not JSON/);
  assert.match(parseMessage('[1,2]').error, /JSON object/);
  assert.match(parseMessage('{"kind":"start"}').error, /string 'type'/);
  assert.match(parseMessage('{"type":"ready"}').error, /unknown message type "ready"/);
  assert.deepEqual(parseMessage('{"type":"ready"}', BRIDGE_TO_PYTHON), { message: { type: 'ready' } });
});
