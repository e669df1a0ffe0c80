// `node --import ./scripts/ts-loader.js`: runs TypeScript files through scripts/ts-hooks.js (see there why).
import { register } from 'node:module'

register('./ts-hooks.js', import.meta.url)
