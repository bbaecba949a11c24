// Installing Debian packages a script needs, when it can: as root with apt-get (the project's
// machines and CI). Elsewhere it says what to install and returns false.
import { spawnSync } from 'node:child_process'

/** Whether `command` is on PATH. */
export function has(command) {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0
}

/** Installs Debian `packages` (for `why`); true when they are installed. */
export function aptInstall(packages, why, tag) {
  const root = typeof process.getuid === 'function' && process.getuid() === 0
  if (!root || !has('apt-get')) {
    console.error(`${tag}: install Debian's ${packages.join(' ')} (apt-get install ${packages.join(' ')}) ${why}`)
    return false
  }
  console.error(`${tag}: installing Debian's ${packages.join(' ')} ${why}`)
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  const update = spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env })
  const install = update.status === 0 ? spawnSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], { stdio: 'inherit', env }) : update
  return install.status === 0
}
