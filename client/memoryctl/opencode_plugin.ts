// memoryd for OpenCode: the project's memory in every session.
//
// - experimental.chat.system.transform: the stable context (resolved rules + MEMORY.md), fetched once per session and
//   memoized, so the system prompt stays byte-identical for the whole session (the host's prompt cache keeps it).
// - chat.message: recall for the prompt, added as a synthetic text part of the user's message.
// - tool.execute.after: each tool call recorded as evidence (observe); output may be undefined for MCP tools.
// - session.idle: a nudge to consolidate when enough evidence is waiting.
//
// Every call goes through `memoryctl hook opencode <event>` (the same code Claude Code's and Codex's hooks run): it
// has its own deadlines and fails open — no daemon, no memoryctl, or any fault gives no output and changes nothing.
// Install: `memoryctl install opencode` writes this file to .opencode/plugin/memoryd.ts (or, with --scope user,
// ~/.config/opencode/plugin/memoryd.ts) with that memoryctl's absolute path and the daemon's home/socket variables
// filled in below, and registers the MCP server. MEMORYCTL names another memoryctl to run.

import type { Plugin } from "@opencode-ai/plugin"

const MEMORYCTL = process.env.MEMORYCTL || "memoryctl"
// where the daemon is (MEMORYD_HOME, MEMORYD_SOCKET, XDG_*), as `memoryctl install opencode` ran: filled in by it
const RECORDED_ENV: Record<string, string> = {}
const MAX_TOOL_TEXT = 2000

type HookAnswer = { hookSpecificOutput?: { additionalContext?: string }; decision?: string; reason?: string }

async function hook(event: string, payload: Record<string, unknown>, deadlineMs: number): Promise<HookAnswer | null> {
  try {
    const child = Bun.spawn([MEMORYCTL, "hook", "opencode", event], {
      stdin: new Blob([JSON.stringify(payload)]),
      env: { ...process.env, ...RECORDED_ENV },
      stdout: "pipe",
      stderr: "ignore",
    })
    const timer = setTimeout(() => child.kill(), deadlineMs)
    const text = await new Response(child.stdout).text()
    clearTimeout(timer)
    await child.exited
    return text.trim() ? (JSON.parse(text) as HookAnswer) : null
  } catch {
    return null // fail open: memory is a help, never a reason for a turn to fail
  }
}

function cap(value: unknown): string {
  const text = typeof value === "string" ? value : JSON.stringify(value ?? null)
  return text.length > MAX_TOOL_TEXT ? text.slice(0, MAX_TOOL_TEXT) + "…" : text
}

export const MemorydPlugin: Plugin = async ({ directory }) => {
  const stable = new Map<string, Promise<string>>() // session → its stable block, fetched once
  const nudges = new Map<string, string>() // session → a consolidation request for its next turn

  return {
    "experimental.chat.system.transform": async (input, output) => {
      const session = input.sessionID ?? "default"
      if (!stable.has(session)) {
        stable.set(
          session,
          hook("SessionStart", { session_id: session, cwd: directory, hook_event_name: "SessionStart" }, 2000).then(
            (answer) => answer?.hookSpecificOutput?.additionalContext ?? "",
          ),
        )
      }
      const text = await stable.get(session)!
      if (text) output.system.push(text)
      const nudge = nudges.get(session)
      if (nudge) {
        nudges.delete(session) // once: the stable block alone stays byte-identical on later turns
        output.system.push(nudge)
      }
    },

    "chat.message": async (input, output) => {
      const parts = output.parts as Array<Record<string, unknown>>
      const first = parts.find((part) => part.type === "text")
      const prompt = parts
        .filter((part) => part.type === "text" && !part.synthetic)
        .map((part) => String(part.text ?? ""))
        .join("\n")
      if (!first || !prompt.trim()) return
      const answer = await hook(
        "UserPromptSubmit",
        { session_id: input.sessionID, cwd: directory, prompt, hook_event_name: "UserPromptSubmit" },
        1000,
      )
      const recall = answer?.hookSpecificOutput?.additionalContext
      if (recall) parts.push({ ...first, id: `${String(first.id)}-memoryd`, text: recall, synthetic: true })
    },

    "tool.execute.after": async (input, output) => {
      await hook(
        "PostToolUse",
        {
          session_id: input.sessionID,
          cwd: directory,
          hook_event_name: "PostToolUse",
          tool_name: input.tool,
          tool_input: cap(input.args),
          tool_response: cap(output?.output), // undefined for some MCP tools
        },
        300,
      ).catch(() => null)
    },

    event: async ({ event }) => {
      if (event.type !== "session.idle") return
      const session = (event.properties as { sessionID?: string }).sessionID
      if (!session) return
      const answer = await hook(
        "Stop",
        { session_id: session, cwd: directory, hook_event_name: "Stop", stop_hook_active: nudges.has(session) },
        1000,
      )
      if (answer?.decision === "block" && answer.reason) nudges.set(session, answer.reason)
    },
  }
}

export default MemorydPlugin
