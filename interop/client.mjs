// client.mjs drives gatekeeper with the official OpenAI Node SDK. It is run
// by interop_test.go, one scenario per process:
//
//   node client.mjs SCENARIO BASE_URL
//
// and prints one JSON object on stdout with what the SDK returned or threw.
// Scenarios:
//   basic  chat and completions, streaming and not
//   retry  two chat calls in a row; the second meets gatekeeper's 429 and the
//          SDK must retry after Retry-After and succeed
//   giveup one chat call that gatekeeper refuses every time (503); the SDK
//          retries maxRetries times and then throws the OpenAI-style error
import OpenAI from 'openai';

const [scenario, baseURL, maxRetriesArg] = process.argv.slice(2);
if (!scenario || !baseURL) {
  console.error('usage: node client.mjs basic|retry|giveup BASE_URL [MAX_RETRIES]');
  process.exit(2);
}

const client = new OpenAI({
  apiKey: 'sk-interop-test',
  baseURL,
  maxRetries: maxRetriesArg === undefined ? 2 : Number(maxRetriesArg),
  timeout: 20_000,
});

const messages = [{ role: 'user', content: 'Say hello.' }];
let step = 'start'; // the call running, for the error report

async function basic() {
  step = 'chat';
  const chat = await client.chat.completions.create({ model: 'fake', messages, max_tokens: 8 });
  let chatStream = '';
  let chatChunks = 0;
  step = 'chat stream';
  const cs = await client.chat.completions.create({ model: 'fake', messages, max_tokens: 8, stream: true });
  for await (const chunk of cs) {
    chatChunks++;
    chatStream += chunk.choices[0]?.delta?.content ?? '';
  }
  step = 'completion';
  const completion = await client.completions.create({ model: 'fake', prompt: 'Say hello.', max_tokens: 8 });
  let completionStream = '';
  let completionChunks = 0;
  step = 'completion stream';
  const ps = await client.completions.create({ model: 'fake', prompt: 'Say hello.', max_tokens: 8, stream: true });
  for await (const chunk of ps) {
    completionChunks++;
    completionStream += chunk.choices[0]?.text ?? '';
  }
  return {
    chat: chat.choices[0].message.content,
    chatUsage: chat.usage?.total_tokens ?? 0,
    chatStream,
    chatChunks,
    completion: completion.choices[0].text,
    completionStream,
    completionChunks,
  };
}

async function retry() {
  const first = await client.chat.completions.create({ model: 'fake', messages, max_tokens: 8 });
  const second = await client.chat.completions.create({ model: 'fake', messages, max_tokens: 8 });
  return { first: first.choices[0].message.content, second: second.choices[0].message.content };
}

async function giveup() {
  try {
    await client.chat.completions.create({ model: 'fake', messages, max_tokens: 8 });
  } catch (err) {
    if (err instanceof OpenAI.APIError) {
      return {
        thrown: err.constructor.name,
        status: err.status,
        message: err.error?.message ?? '',
        code: err.code ?? '',
        type: err.type ?? '',
        retryAfter: err.headers?.get('retry-after') ?? '',
        reason: err.headers?.get('x-gatekeeper-reason') ?? '',
      };
    }
    throw err;
  }
  return { thrown: '' };
}

const scenarios = { basic, retry, giveup };
if (!(scenario in scenarios)) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
try {
  const out = await scenarios[scenario]();
  process.stdout.write(JSON.stringify(out) + '\n');
} catch (err) {
  // The cause chain says which side closed what (undici's "terminated"
  // carries the socket error), and step which call was running.
  const causes = [];
  for (let c = err?.cause; c && causes.length < 4; c = c.cause) {
    causes.push(`${c?.constructor?.name}: ${c?.code ?? ''} ${c?.message ?? ''}`.trim());
  }
  console.error(`${scenario} (${step}): ${err?.constructor?.name}: ${err?.message}` +
    (causes.length ? ` caused by ${causes.join(' <- ')}` : ''));
  process.exit(1);
}
