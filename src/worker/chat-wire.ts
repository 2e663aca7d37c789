// The OpenAI chat parameters as job_data.params carries them (openapi.json JobData.params,
// docs/openai.md): the types the worker shares with the coordinator (src/validation/chat-params.ts),
// and what it does with them.

export type { ChatMessage, ChatParams, ToolCall } from '../validation/chat-params.js';
