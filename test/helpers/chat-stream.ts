// Reading a streamed chat completion through the official OpenAI SDK as a client does, for the
// tests of what a client sees of a stream whose nodes fail, continue or are refused.
import type OpenAI from 'openai';

/**
 * What the client read: the text, and how the stream ended (its finish reason, or the error's
 * code where it ended in one). `onText` hears the text each time it grows.
 */
export async function readChatStream(
  stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>,
  onText?: (text: string) => void,
): Promise<{ text: string; finish: string | null; error: string | null }> {
  let text = '';
  let finish: string | null = null;
  try {
    for await (const c of stream) {
      const delta = c.choices[0]?.delta.content ?? '';
      if (delta) {
        text += delta;
        onText?.(text);
      }
      finish = c.choices[0]?.finish_reason ?? finish;
    }
  } catch (err) {
    return { text, finish, error: String((err as { code?: unknown }).code ?? err) };
  }
  return { text, finish, error: null };
}
