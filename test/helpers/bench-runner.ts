// `npm run bench` (bench/run.js) as the bench tests run it: a child with the environment given, its output read.
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const RUNNER = fileURLToPath(new URL('../../bench/run.js', import.meta.url))

/** bench/run.js run with `env` over this process's: its exit code and what it printed. */
export async function runBench (env: NodeJS.ProcessEnv): Promise<{ code: number | null, stdout: string, stderr: string }> {
  return await new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [RUNNER], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    child.on('error', reject)
    child.on('exit', (code) => { resolve({ code, stdout, stderr }) })
  })
}

/** `s` matched literally inside a regular expression. */
export const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
